"""Start-up calibration: time and held-out accuracy of the `sps` and `additive` cost models (issue 4).

On the bundled model with the shipped DSpark draft (or --draft), for each dtype the engine is
started with `--enable_adaptive_target_verify=true` exactly as serving would start it: warm-up of
every prepared shape, then calibration through real rounds with synthetic requests, then the fit
(`adaspec calibrate` does the same through the CLI). Reported per dtype:

- warm-up seconds and calibration seconds (sampling + fit), and their sum (what start-up adds);
- per cost model (`additive`, `sps`): the held-out error of `table.metadata.heldout`
  (leave-one-cell-out median and max relative error of predicted vs measured whole-round cost).
  Sampling does not depend on the model (the same rounds are timed), so by default the points
  are sampled once per dtype with the first model and the other model is fitted to the very same
  points (--refit=true); --refit=false starts one engine per model instead;
- a PNG per dtype and model of measured points vs the fitted model per request bucket
  (`adaspec.calibration.plot.plot_fit`), under --plot_dir.

Modes: default = the built-in calibration (R-F3 defaults: every prepared request bucket and
target-row bucket, prefill 2048 tokens, KV 1..context limit, warm-up 8, 3 windows of 32 rounds per
point) -- many minutes per dtype on one CPU thread; `--quick` = the same grid with a reduced
sampling config (short context, fewer and shorter windows). In quick mode the script also prints
an *estimate* of the default calibration's time: the default number of timed rounds per cell times
the cell's measured round cost (a lower bound: the default context is longer, so rounds cost more).

    taskset -c 0 python bench/calibration.py --quick --json_out=bench/results/calibration.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import fmt, log, markdown_table  # noqa: E402

QUICK = {"contexts": [{"prefill_tokens": 128, "min_kv_length": 1, "max_kv_length": 384}],
         "warmup_steps": 1, "window_steps": 6, "windows_per_point": 2}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="calibration time and held-out cost-model error (sps, additive) on the bundled model",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--algorithm", default="DSpark", choices=("DSpark", "MTP"), help="speculative algorithm")
    p.add_argument("--width", type=int, default=7, choices=(5, 7), help="--num_speculative_tokens (draft width)")
    p.add_argument("--draft", default=None, help="draft directory (default: the shipped draft of the algorithm)")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32, bfloat16")
    p.add_argument("--models", default="additive,sps", help="comma-separated cost models: additive, sps")
    p.add_argument("--quick", action="store_true",
                   help=f"reduced sampling config {json.dumps(QUICK)} on the default grid, plus an estimate of "
                        "the default calibration's time")
    p.add_argument("--calibration_json", default=None,
                   help="explicit --adaptive_target_verify_calibration file (overrides --quick's config)")
    p.add_argument("--refit", default="true", choices=("true", "false"),
                   help="sample once per dtype and fit every model to the same points (false: one engine per model)")
    p.add_argument("--max_seqs", type=int, default=16,
                   help="--max_seqs_per_batch: the prepared request buckets are 1, 4, 16, ... up to it on CPU "
                        "(the sparse CPU geometry, adaspec.geometry.choose_prepared; 1, 2, 4, ... elsewhere)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: the issue's target)")
    p.add_argument("--plot_dir", default=str(common.RESULTS_DIR), help="PNG of each fit goes here; empty: no plots")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    args.dtypes = common.parse_list(args.dtypes, str, ("float32", "bfloat16"), name="dtypes")
    args.models = common.parse_list(args.models, str, ("additive", "sps"), name="models")
    args.refit = args.refit == "true"
    return args


def time_startup_phases() -> dict:
    """Wrap the engine's warm-up (adaspec.engine.control.warm_up) and calibration
    (AdaptiveControl._load_or_calibrate) with wall and process-CPU timers (bench-side only)."""
    from adaspec.engine import control

    record = {"warmup_s": 0.0, "warmup_cpu_s": 0.0, "calibration_s": 0.0, "calibration_cpu_s": 0.0}

    def wrap(owner, name, key):
        original = getattr(owner, name)

        def timed(*a, **k):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return original(*a, **k)
            finally:
                record[key + "_s"] += time.perf_counter() - t0
                record[key + "_cpu_s"] += time.process_time() - c0

        setattr(owner, name, timed)

    wrap(control, "warm_up", "warmup")
    wrap(control.AdaptiveControl, "_load_or_calibrate", "calibration")
    return record


def default_rounds_estimate(table, facts) -> dict | None:
    """Seconds the built-in calibration would spend in timed rounds on this grid: for every cell
    (bcap, G), (8 warm-up + 3 x 32) rounds x the cell's median measured round cost here."""
    from adaspec.calibration.config import (DEFAULT_WARMUP_STEPS, DEFAULT_WINDOW_STEPS, DEFAULT_WINDOWS_PER_POINT)
    from adaspec.calibration.cost_points import cell_medians

    cells = cell_medians(table.points)
    rounds = DEFAULT_WARMUP_STEPS + DEFAULT_WINDOW_STEPS * DEFAULT_WINDOWS_PER_POINT
    missing = [(b, g) for b in facts.request_buckets for g in facts.target_rows.get(b, ()) if (b, g) not in cells]
    return {"seconds": rounds * sum(cells.values()), "rounds_per_cell": rounds, "cells": len(cells),
            "default_cells_not_measured": len(missing)}


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(args.threads)
    info = common.run_info(args)
    phases = time_startup_phases()
    from adaspec.calibration.cost_table import CostTable

    print(f"# calibration bench: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="adaspec_calib_"))
    cal_file = None
    if args.calibration_json:
        cal_file = args.calibration_json
    elif args.quick:
        cal_file = workdir / "quick.json"
        cal_file.write_text(json.dumps(QUICK))
    mode = "custom" if args.calibration_json else "quick" if args.quick else "default"
    print(f"# {args.algorithm} w={args.width}, mode {mode}"
          + (f" ({Path(cal_file).read_text().strip()})" if cal_file else " (built-in R-F3 defaults)"), flush=True)
    plot_dir = Path(args.plot_dir) if args.plot_dir else None
    if plot_dir:
        plot_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for dtype in args.dtypes:
        sample_models = args.models[:1] if args.refit else args.models
        for sampled in sample_models:
            if cal_file:
                data = json.loads(Path(cal_file).read_text())
                data["model"] = sampled
                f = workdir / f"cal_{dtype}_{sampled}.json"
                f.write_text(json.dumps(data))
                flags = {"adaptive_target_verify_calibration": str(f)}
                max_len = 512
            elif sampled != "additive":
                f = workdir / f"cal_{dtype}_{sampled}.json"
                f.write_text(json.dumps({"model": sampled}))
                flags = {"adaptive_target_verify_calibration": str(f)}
                max_len = None
            else:
                flags, max_len = {}, None
            for key in phases:
                phases[key] = 0.0
            t0 = time.perf_counter()
            c0 = time.process_time()
            llm = common.build_llm(dtype, args.algorithm, args.width, args.draft, max_seqs=args.max_seqs,
                                   max_model_len=max_len, threads=args.threads,
                                   enable_adaptive_target_verify=True, **flags)
            startup, startup_cpu = time.perf_counter() - t0, time.process_time() - c0
            ctl = llm.engine.control
            warm_s, calib_s = phases["warmup_s"], phases["calibration_s"]
            eff = ctl.effective
            fitted = [sampled] + ([m for m in args.models if m != sampled] if args.refit else [])
            estimate = default_rounds_estimate(ctl.table, ctl.facts) if mode != "default" else None
            for model in fitted:
                table = ctl.table if model == sampled else CostTable.build(
                    ctl.table.points, dataclasses.replace(eff, model=model), ctl.compat)
                h = table.metadata.heldout or {}
                png = None
                if plot_dir:
                    from adaspec.calibration.plot import plot_fit

                    png = str(plot_fit(table, plot_dir / f"calibration_{args.algorithm.lower()}{args.width}_{dtype}_"
                                                       f"{model}{'' if mode == 'default' else '_' + mode}.png"))
                row = {"dtype": dtype, "model": model, "sampled_with": sampled, "mode": mode,
                       "startup_s": startup, "startup_cpu_s": startup_cpu, **dict(phases),
                       "warmup_plus_calibration_s": warm_s + calib_s,
                       "warmup_plus_calibration_cpu_s": phases["warmup_cpu_s"] + phases["calibration_cpu_s"],
                       "points": len(table.points), "cells": len({(p.bcap, p.x) for p in table.points}),
                       "request_buckets": list(eff.request_buckets), "contexts": [c.model_dump() for c in eff.contexts],
                       "warmup_steps": eff.warmup_steps, "window_steps": eff.window_steps,
                       "windows_per_point": eff.windows_per_point,
                       "heldout_median_rel_error": h.get("median_rel_error"),
                       "heldout_max_rel_error": h.get("max_rel_error"), "heldout_evaluated": h.get("evaluated"),
                       "heldout_skipped": (h.get("skipped_disconnected") or 0) + (h.get("skipped_uncovered") or 0),
                       "default_estimate": estimate, "png": png, "model_params": table.model.to_dict()}
                rows.append(row)
                err = row["heldout_median_rel_error"]
                log(f"[bench] {dtype} {model}: warm-up {warm_s:.1f} s, calibration {calib_s:.1f} s "
                    f"({row['cells']} cells, {row['points']} windows), held-out median error "
                    f"{'n/a' if err is None else f'{100 * err:.1f}%'}" + (f", plot {png}" if png else ""))
            del llm
            common.drop_shared_weights()

    print(f"\n### calibration time and held-out cost-model error ({args.algorithm} w={args.width}, mode {mode}, "
          f"{args.threads} thread)\n")
    head = ["dtype", "model", "warm-up s", "calibration s", "total s (wall)", "total s (CPU)", "cells",
            "held-out median err.", "held-out max err.", "evaluated/skipped"]
    body = [[r["dtype"], r["model"] + ("" if r["model"] == r["sampled_with"] else " (refit)"), fmt(r["warmup_s"]),
             fmt(r["calibration_s"]), fmt(r["warmup_plus_calibration_s"]), fmt(r["warmup_plus_calibration_cpu_s"]),
             r["cells"],
             fmt(None if r["heldout_median_rel_error"] is None else 100 * r["heldout_median_rel_error"], 1, "%"),
             fmt(None if r["heldout_max_rel_error"] is None else 100 * r["heldout_max_rel_error"], 1, "%"),
             f"{r['heldout_evaluated']}/{r['heldout_skipped']}"] for r in rows]
    print(markdown_table(head, body, "llrrrrrrrr"))
    est = [r for r in rows if r["default_estimate"] and r["model"] == r["sampled_with"]]
    for r in est:
        e = r["default_estimate"]
        print(f"\n{r['dtype']}: the built-in default calibration would time {e['rounds_per_cell']} rounds in each of "
              f"{e['cells']} cells: at least ~{e['seconds']:.0f} s of rounds at this context length "
              f"(+ warm-up, prefills of 2048-token contexts, and longer attention at KV up to 2048)")
    for r in rows:
        if r["png"]:
            print(f"plot: {r['png']}")
    if args.json_out:
        common.write_json(args.json_out, {"info": info, "results": rows})
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
