"""Adaptive control vs every fixed setting, with an oracle ceiling (issue 5, item 6; R-I3).

In one process, on held-out prompts (code, chat, prose, and a mixed stream interleaving the three;
`adaspec.training.corpus.heldout_prompts`, text the draft trainer never reads; `copy`, the held-out
copy-heavy set; `staggered`, the mixed stream with request i arriving i x --arrival_gap seconds of
CPU time after the start, so requests join and leave a batch of changing size), greedy or --temperature:

- MTP draft step: adaptive (`enable_adaptive_draft_step`) vs every fixed k = 1..k_max and plain; the same for the
  MTP+Suffix draft (`hyb_*`);
- adaptive target verify for DSpark w=7 and MTP w=5: synchronous (`enable_adaptive_target_verify`)
  and asynchronous (`+ enable_schedule_overlap`) vs full width, vs every fixed verify length
  L < w (the draft still proposes w tokens, the target verifies min(L, cap) of them), and vs an
  **oracle** that verifies exactly the draft tokens that the target will accept.

Configuration names (--configs): `plain`, `mtp_k1`..`mtp_kK` (fixed k; `mtp_kK` with K = w = 5 is
also MTP w=5 full width), `mtp_step` (adaptive draft step; `mtp_step_sym` the same with the symmetric k = 0 rule of
R-C2, policy `zero_confidence` 0, for A/B; `mtp_step_alt` with the policy fields of --alt_step_policy, with
--alt_shares_table priced by `mtp_step`'s start-up table), `hyb_k1`..`hyb_kK` and `hyb_step` (the MTP+Suffix draft,
issue 10: fixed k, and the adaptive draft step over it), and per verify family F in
{`dspark7`, `mtp5`}: `F_full`, `F_L1`..`F_L{w-1}`, `F_sync`, `F_async`, `F_oracle`
(`mtp5_full` is the `mtp_k5` engine, measured once).

Baselines that are not product modes (fixed verify length L, the oracle) and the controller timers
use the engine's public injection points (`LLMEngine.plan_transform`, the round runner's drafter
and admission objects, `AdaptiveControl.reset()`): bench/adaptive_hooks.py. Controllers are rebuilt
cold (same table and policy) before every run (--reset_controllers), so a run does not start from
another stream's feedback. Tables and plots: bench/adaptive_report.py.

Calibration: adaptive engines calibrate at start-up. The bench gives them a small explicit
calibration (--calibration_json; default written by the bench: request buckets = batch sizes and the
product's CPU buckets below them (1, 4, 16, ...), one context range, few steps), calibrates each adaptive-verify (algorithm, width, dtype) once, saves
the table (`adaptive_target_verify_cost_table_output`) and loads it for the asynchronous engine
(`adaptive_target_verify_cost_table`). Adaptive draft step cannot load tables (R-C3): it calibrates
with the same buckets and context through `adaptive_draft_step_config`, but with the product's default windows
(8 warm-up rounds, 3 windows of 32: bench/adaptive_calibration.py says why). Calibration time and the
table's held-out error (`table.metadata.heldout`) are reported.

Isolation (--isolate, bench/adaptive_isolated.py): every measurement in a fresh child process that
builds only its own engine; inside one process the build order moves a run by up to ~7%. With
--paired each child builds plain and one other configuration instead (build order alternating),
serves them A B B A, and the tables add the median over children of the per-child ratio to plain:
fresh processes of one configuration differ by more than the 2% floor on the 2-vCPU VMs.

Timing: one measurement = a whole prompt stream (max(--num_prompts, B) prompts, prefill included)
with continuous batching, at most B requests running. Configurations alternate order across
repeats; medians. Wall and process-CPU clocks; ratios use --clock. TPOT = (finish - first token) /
(tokens - 1) per request, median over requests (wall clock).

    taskset -c 0 python bench/adaptive.py --batch_sizes=1,4,8,16 --dtypes=float32 --sources=mixed \
        --num_prompts=6 --max_tokens=48 --repeats=1 --json_out=bench/results/adaptive.json
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.adaptive_calibration import calibration_fields, write_calibration_files  # noqa: E402
from bench.adaptive_args import parse_args  # noqa: E402,F401  (re-exported: scripts call bench.adaptive.parse_args)
from bench.adaptive_configs import VERIFY_FAMILIES, config_kind, engine_of  # noqa: E402
from bench.adaptive_hooks import measure  # noqa: E402
from bench.adaptive_interleaved import measure_interleaved, repeat_ratios  # noqa: E402
from bench.adaptive_isolated import IsolatedRunner, child_main, measure_pairs  # noqa: E402
from bench.adaptive_report import add_paired, plot, print_tables, summarize_cell, target_rows  # noqa: E402
from bench.common import fmt_hist, log  # noqa: E402

# ---- engines -----------------------------------------------------------------------------------------
def build_engines(args, dtype: str, files: dict, table_dir: Path, first: str | None = None) -> tuple[dict, dict]:
    """{engine name: LLM}, {engine name: calibration record}; the engine named `first` is built first
    (--paired alternates which of a pair's two engines a child builds first)."""
    need = {engine_of(n, args.interleave) for n in args.configs}
    engines, calib = {}, {}
    base = dict(max_seqs=max(args.batch_sizes), max_model_len=args.max_model_len, threads=args.threads)
    adaptive_geometry = dict(graph_decode_batch_sizes=tuple(calibration_fields(args)["request_buckets"]))
    pending: list[tuple] = []  # (name, algo, width, flags), built in order below ("first" moved to the front)

    def add(name, algo, width, **flags):
        pending.append((name, algo, width, flags))

    def build(name, algo, width, **flags):
        draft = args.mtp_draft if algo in ("MTP", "MTP+Suffix") else args.dspark_draft if algo == "DSpark" else None
        t0 = time.perf_counter()
        engines[name] = common.build_llm(dtype, algo, width, draft, **base, **flags)
        took = time.perf_counter() - t0
        ctl = engines[name].engine.control
        if ctl is not None:
            heldout = ctl.table.metadata.heldout or {}
            calib[name] = {"startup_s": took, "calibration_seconds": ctl.calibration_seconds,
                           "source": ctl.table.source or "calibrated now",
                           "heldout_median_rel_error": heldout.get("median_rel_error"),
                           "heldout_max_rel_error": heldout.get("max_rel_error"),
                           "model": ctl.table.model.kind if hasattr(ctl.table.model, "kind") else None,
                           "coverage": ctl.table.coverage_lines()}
            err = calib[name]["heldout_median_rel_error"]
            log(f"[bench] {dtype} {name}: start-up incl. warm-up/calibration {took:.1f} s "
                f"(control {ctl.calibration_seconds:.1f} s, {calib[name]['source']}), held-out median error "
                f"{'n/a' if err is None else f'{100 * err:.1f}%'}")
        else:
            log(f"[bench] {dtype} {name}: engine ready in {took:.1f} s")

    if "plain" in need:
        add("plain", "none", None)
    for k in range(1, args.k_max + 1):
        if f"mtp_k{k}" in need:
            add(f"mtp_k{k}", "MTP", k)
    for name, cfg in (("mtp_step", "step"), ("mtp_step_sym", "step_sym"), ("mtp_step_alt", "step_alt")):
        if name in need:
            add(name, "MTP", args.k_max, enable_adaptive_draft_step=True,
                adaptive_draft_step_config=str(files[cfg]), **adaptive_geometry)
    for k in range(1, args.k_max + 1):  # MTP+Suffix (issue 10): fixed k, then the draft step over it
        if f"hyb_k{k}" in need:
            add(f"hyb_k{k}", "MTP+Suffix", k)
    if "hyb_step" in need:
        add("hyb_step", "MTP+Suffix", args.k_max, enable_adaptive_draft_step=True,
            adaptive_draft_step_config=str(files["step"]), **adaptive_geometry)
    for fam, (algo, w) in VERIFY_FAMILIES.items():
        if fam == "dspark7" and f"{fam}_full" in need:
            add(f"{fam}_full", algo, w)
        for L in range(1, w):  # --interleave: a full-width engine per fixed verify length (engine_of)
            if f"{fam}_L{L}" in need:
                add(f"{fam}_L{L}", algo, w)
        table = table_dir / f"{fam}_{dtype}.json"
        for mode in ("sync", "async"):
            name = f"{fam}_{mode}"
            if name not in need:
                continue
            flags = dict(enable_adaptive_target_verify=True, **adaptive_geometry)
            if mode == "async":
                flags["enable_schedule_overlap"] = True
            flags["_table"] = table  # resolved when built: the family's first engine calibrates and saves it
            add(name, algo, w, **flags)
    pending.sort(key=lambda spec: spec[0] != first)  # stable: the rest keep their order
    for name, algo, width, flags in pending:
        table = flags.pop("_table", None)
        if table is not None and table.exists():
            flags["adaptive_target_verify_cost_table"] = str(table)
        elif table is not None:
            flags["adaptive_target_verify_calibration"] = str(files[name.partition("_")[0]])
            flags["adaptive_target_verify_cost_table_output"] = str(table)
        build(name, algo, width, **flags)
    if args.alt_shares_table:  # one measured table, two policies (parse_args checked both are built)
        engines["mtp_step_alt"].engine.control.install_table(engines["mtp_step"].engine.control.table)
        own = calib["mtp_step_alt"]  # its start-up time is its own; the table, and so its held-out error, mtp_step's
        calib["mtp_step_alt"] = dict(calib["mtp_step"], startup_s=own["startup_s"],
                                     calibration_seconds=own["calibration_seconds"], source="mtp_step's table")
        log("[bench] mtp_step_alt: priced by mtp_step's start-up table (--alt_shares_table)")
    return engines, calib


# ---- main ---------------------------------------------------------------------------------------------
def log_run(t_start: float, dtype: str, B: int, source: str, rep: int, name: str, run) -> None:
    acc = run.stats["mean_acceptance_length"]
    extra = ""
    if "chosen" in run.extra:
        extra = (f", {run.extra['chosen_axis']} {fmt_hist(run.extra['chosen'])}, controller "
                 f"{100 * run.extra['controller_share']:.2f}%")
    log(f"  [{time.perf_counter() - t_start:6.0f} s] {dtype} B={B} {source} rep {rep + 1} "
        f"{name:14s} {run.tokens} tok {run.wall_s:6.2f} s wall / {run.cpu_s:6.2f} s CPU = "
        f"{run.tokens / run.cpu_s:6.1f} tok/s CPU" + (f", acc. length {acc:.2f}" if acc else "") + extra)


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(args.threads)
    common.share_target_weights()
    info = common.run_info(args)
    print(f"# adaptive control bench: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    print(f"# configs={','.join(args.configs)}", flush=True)
    print(f"# batch_sizes={args.batch_sizes} dtypes={args.dtypes} sources={args.sources} num_prompts={args.num_prompts} "
          f"max_tokens={args.max_tokens} temperature={args.temperature} repeats={args.repeats} clock={args.clock} "
          f"arrival_gap={args.arrival_gap}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="adaspec_bench_"))
    table_dir = Path(args.table_dir) if args.table_dir else workdir
    table_dir.mkdir(parents=True, exist_ok=True)
    files = write_calibration_files(args, workdir)
    if args.child_spec:  # --isolate's child: one measurement, one JSON line (bench/adaptive_isolated.py)
        return child_main(args, build_engines, files, table_dir)
    for key, f in files.items():
        print(f"# calibration file ({key}): {json.dumps(json.loads(f.read_text()))}", flush=True)
    print(f"# cost tables saved to / loaded from {table_dir}", flush=True)
    t_start = time.perf_counter()
    cells: dict = {}
    calib_all: dict = {}
    needs_reference = any(config_kind(n)["hook"] and config_kind(n)["hook"][0] == "oracle" for n in args.configs)
    isolated = IsolatedRunner(list(sys.argv[1:] if argv is None else argv), workdir, table_dir) if args.isolate else None
    for dtype in args.dtypes:
        engines, sets = {}, {}
        if isolated is None:
            engines, calib = build_engines(args, dtype, files, table_dir)
            calib_all.update({(dtype, n): c for n, c in calib.items()})
            sets = common.warmed_prompt_sets(engines, args)
        for B in args.batch_sizes:
            for source in args.sources:
                stream = sets[source][: max(args.num_prompts, B)] if sets else None
                runs: dict[str, list] = {n: [] for n in args.configs}
                reference, by_prompt = None, None  # the plain run's greedy outputs (the oracle's reference)
                if args.paired:
                    ratios = measure_pairs(args, isolated, dtype, source, B, runs, t_start)
                elif args.interleave:
                    for rep in range(args.repeats):
                        for name, run in measure_interleaved(args, engines, stream, B, rep).items():
                            runs[name].append(run)
                            log_run(t_start, dtype, B, source, rep, name, run)
                    ratios = repeat_ratios(runs, args.clock)
                for rep in range(0 if args.paired or args.interleave else args.repeats):
                    order = common.alternating(args.configs, rep)
                    if reference is None and needs_reference and order[0] != "plain":
                        order = ["plain"] + [n for n in order if n != "plain"]
                    for name in order:
                        if isolated is not None:
                            run = isolated.measure(dtype, name, source, B, reference)
                        else:
                            run = measure(args, engines[config_kind(name)["engine"]], name, stream, B, by_prompt,
                                          args.arrival_gap if source == "staggered" else 0.0)
                        runs[name].append(run)
                        if name == "plain" and reference is None:
                            reference = run.outputs
                            by_prompt = {p.ids: o for p, o in zip(stream, reference)} if stream is not None else None
                        log_run(t_start, dtype, B, source, rep, name, run)
                cells[(dtype, source, B)] = summarize_cell(args, dtype, B, source, runs)
                if args.paired or args.interleave:
                    add_paired(cells[(dtype, source, B)], ratios)
        if isolated is not None:
            calib_all.update({k: v for k, v in isolated.calibration.items() if k[0] == dtype})
        del engines
        common.drop_shared_weights()

    targets = target_rows(args, cells)
    print_tables(args, cells, targets, calib_all)
    plots = plot(args, cells, Path(args.plot_dir)) if args.plot_dir else []
    for pth in plots:
        print(f"plot: {pth}")
    mism = [r for c in cells.values() for r in c.values() if r["dtype"] == "float32" and r["config"] != "plain"
            and r["equal_to_plain"]["equal"] != r["equal_to_plain"]["sequences"]]
    print(f"\nfloat32 exactness: {'all runs equal plain greedy' if not mism else f'{len(mism)} MISMATCH cells'}; "
          f"total time {time.perf_counter() - t_start:.0f} s")
    if args.json_out:
        payload = {"info": info, "calibration_files": {k: json.loads(f.read_text()) for k, f in files.items()},
                   "calibration": [{"dtype": d, "engine": n, **c} for (d, n), c in calib_all.items()],
                   "results": [r for c in cells.values() for r in c.values()], "targets": targets, "plots": plots}
        common.write_json(args.json_out, payload)
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
