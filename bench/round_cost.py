"""Round cost against target rows, from the engine's own calibration tables, per linear backend (issue 14).

For each `--linear_backends` entry, in one process, the bundled model with the shipped MTP draft is
started twice exactly as serving starts it, with a small calibration config (request bucket 1, one
context range, --window_steps rounds per window):

- `--enable_adaptive_target_verify` (w = --width): the table's axis is G = target rows per round
  at Bcap 1 (every round drafts w tokens, then verifies G rows). G = 4 against G = 1 is "a round
  with 4 target rows against a 1-row round" with the draft cost in both;
- `--enable_adaptive_draft_step` (k_max = --width): the axis is k draft steps, k + 1 target rows;
  k = 3 against k = 0 is a full MTP k = 3 round (3 draft steps + 4 target rows) against plain.

Reported: the fitted table's cost_ms(1, x) and the median of the measured windows of each cell, and
their ratios to the 1-row cell. The timing is the engine's own (wall clock of real rounds, engine/
calibrate.py). On a busy core wall clock is noisy, so the same measurement is then repeated through
the engine's own `calibrate.measure` with its clock swapped (bench-side) for the process CPU time.

    taskset -c 0 python bench/round_cost.py --linear_backends=fp32,fp16w --json_out=bench/results/round_cost.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import fmt, log, markdown_table  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="round cost vs target rows from calibration tables, per linear backend",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--linear_backends", default="fp32,fp16w", help="comma-separated --linear_backend values")
    p.add_argument("--width", type=int, default=5, choices=(5, 7), help="verify width w / draft-step k_max")
    p.add_argument("--prefill_tokens", type=int, default=128, help="synthetic context per request")
    p.add_argument("--max_kv", type=int, default=512, help="largest KV length the table claims")
    p.add_argument("--window_steps", type=int, default=16, help="rounds per timed window")
    p.add_argument("--windows", type=int, default=3, help="windows per point")
    p.add_argument("--modes", default="verify,draft_step", help="comma-separated: verify, draft_step")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    args.linear_backends = common.parse_list(args.linear_backends, str, ("auto", "fp32", "fp16w", "bf16", "int8"),
                                             name="linear_backends")
    args.modes = common.parse_list(args.modes, str, ("verify", "draft_step"), name="modes")
    return args


def calibration(args) -> dict:
    return {"request_buckets": [1], "contexts": [{"prefill_tokens": args.prefill_tokens, "min_kv_length": 1,
                                                  "max_kv_length": args.max_kv}],
            "warmup_steps": 2, "window_steps": args.window_steps, "windows_per_point": args.windows, "token_seed": 0}


def run(args, backend: str, mode: str, workdir: Path) -> dict:
    from adaspec.calibration.cost_points import cell_medians

    cal = calibration(args)
    if mode == "verify":
        f = workdir / f"verify_{backend}.json"
        f.write_text(json.dumps(cal))
        flags = dict(enable_adaptive_target_verify=True, adaptive_target_verify_calibration=str(f))
    else:
        f = workdir / f"step_{backend}.json"
        f.write_text(json.dumps({"version": 1, "calibration": cal}))
        flags = dict(enable_adaptive_draft_step=True, adaptive_draft_step_config=str(f))
    c0, t0 = time.process_time(), time.perf_counter()
    llm = common.build_llm("float32", "MTP", args.width, max_seqs=1, max_model_len=args.max_kv + 64,
                           linear_backend=backend, graph_decode_batch_sizes=(1,), **flags)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    ctl = llm.engine.control
    table = ctl.table
    cells = {x: 1000 * s for (b, x), s in cell_medians(table.points).items() if b == 1}
    cpu_cells = cpu_time_cells(llm.engine, ctl, mode, args.width)
    fitted = {x: table.cost_ms(1, x) for x in sorted(cells)}
    one = 1 if mode == "verify" else 0  # the 1-row round: G = 1, or k = 0
    out = {"backend": llm.engine.linear_backend, "layer_kernels": llm.engine.layer_kernels, "requested": backend,
           "mode": mode, "axis": table.metadata.x_name,
           "measured_ms": cells, "fitted_ms": fitted,
           "measured_ratio": {x: cells[x] / cells[one] for x in cells},
           "cpu_ms": cpu_cells, "cpu_ratio": {x: cpu_cells[x] / cpu_cells[one] for x in cpu_cells},
           "fitted_ratio": {x: fitted[x] / fitted[one] for x in fitted},
           "startup_wall_s": wall, "startup_cpu_s": cpu, "heldout": table.metadata.heldout}
    log(f"[bench] {backend} {mode}: measured ms {({x: round(v, 1) for x, v in cells.items()})} "
        f"(start-up {wall:.0f} s wall, {cpu:.0f} s CPU)")
    del llm
    common.drop_shared_weights()
    return out


def cpu_time_cells(engine, ctl, mode: str, width: int) -> dict[int, float]:
    """The calibration's own measurement again, its clock swapped for process CPU time."""
    import types

    from adaspec.calibration.cost_points import cell_medians
    from adaspec.engine import calibrate

    eff = ctl.effective
    if mode == "verify":
        make_plan, growth = (lambda b, rows: calibrate.rows_plan(b, rows, width)), (lambda b, rows: width + 1)
    else:
        make_plan, growth = calibrate.steps_plan, (lambda b, k: k + 1)
    real = calibrate.time
    calibrate.time = types.SimpleNamespace(perf_counter=time.process_time, process_time=time.process_time)
    try:
        points = calibrate.measure(engine, {b: list(eff.grid[b]) for b in eff.request_buckets}, make_plan,
                                   eff.context_tuples(), eff.warmup_steps, eff.window_steps, eff.windows_per_point,
                                   eff.token_seed, growth).points
    finally:
        calibrate.time = real
    return {x: 1000 * s for (b, x), s in cell_medians(points).items() if b == 1}


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(1)
    info = common.run_info(args)
    print(f"# round cost from calibration tables: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    print(f"# MTP w/k_max={args.width}, Bcap 1, calibration {json.dumps(calibration(args))}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="adaspec_roundcost_"))
    rows = [run(args, b, m, workdir) for m in args.modes for b in args.linear_backends]
    for mode in args.modes:
        sel = [r for r in rows if r["mode"] == mode]
        axis = sel[0]["axis"]
        xs = sorted(sel[0]["measured_ms"])
        what = ("G target rows (w drafts every round)" if mode == "verify"
                else "k draft steps (k + 1 target rows)")
        print(f"\n### adaptive {mode} table, Bcap 1: round ms by {what}; (× the 1-row round), measured median "
              "/ fitted\n")
        head = ["backend"] + [f"{axis}={x}" for x in xs]
        body = []
        for r in sel:
            body.append([r["backend"] + ("" if r["requested"] == r["backend"] else f" ({r['requested']})")] +
                        [f"{fmt(r['measured_ms'][x])} ({r['measured_ratio'][x]:.2f}×) / {fmt(r['fitted_ms'][x])} "
                         f"({r['fitted_ratio'][x]:.2f}×)" for x in xs])
        print(markdown_table(head, body, "l" + "r" * len(xs)))
        print(f"\nsame rounds, process CPU time (ms; × the 1-row round)\n")
        body = [[r["backend"]] + [f"{fmt(r['cpu_ms'][x])} ({r['cpu_ratio'][x]:.2f}×)" for x in xs] for r in sel]
        print(markdown_table(head, body, "l" + "r" * len(xs)))
    if args.json_out:
        common.write_json(args.json_out, {"info": info, "results": rows})
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
