"""Does the draft-step cost table price a round as serving pays for it? (issue 13, R-C3)

In one process: an adaptive-draft-step MTP engine calibrates its table for one request bucket
(the bench's calibration windows unless told otherwise, contexts prefilled to --prefill_tokens),
and then, for every k = 0..k_max, a fixed engine (plain for k = 0, MTP with k steps otherwise)
serves the same held-out mixed prompts at that batch size, and so does the adaptive engine itself
with its controller replaced by one whose cost function makes k the only choice (a
`DraftStepController` built here and installed as `engine.control.step`; its table is not
touched). Each `engine.step()` is timed on the
process CPU clock; only decode rounds with the whole batch running count (the round's batch comes
from the engine's own round statistics), the first `--skip_rounds` of them are dropped as warm-up,
and the median is reported. Against it: the table's cost of (bucket, k), both as milliseconds and
as a ratio to k = 0, which is what the controller's choice depends on.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/step_cost_check.py --batch_size=16 --k_max=2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--batch_size", type=int, default=16, help="requests decoding together (= the calibrated bucket)")
    p.add_argument("--k_max", type=int, default=2, help="largest draft step count checked")
    p.add_argument("--max_tokens", type=int, default=128, help="tokens per request (end of sequence ignored)")
    p.add_argument("--prefill_tokens", type=int, default=192, help="calibration context: prompt length")
    p.add_argument("--prompt_tokens", type=int, default=192, help="longest held-out prompt served")
    p.add_argument("--warmup_steps", type=int, default=1, help="calibration warm-up rounds per point")
    p.add_argument("--window_steps", type=int, default=6, help="calibration rounds per window")
    p.add_argument("--windows_per_point", type=int, default=2, help="calibration windows per point")
    p.add_argument("--skip_rounds", type=int, default=2, help="full-batch decode rounds dropped at the start of a run")
    p.add_argument("--max_model_len", type=int, default=1024, help="--max_model_len of every engine")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    for name in ("batch_size", "k_max", "max_tokens", "prefill_tokens", "prompt_tokens", "window_steps",
                 "windows_per_point", "max_model_len"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if args.warmup_steps < 0 or args.skip_rounds < 0:
        p.error("--warmup_steps and --skip_rounds must be >= 0")
    return args


def calibrated_costs(args, workdir: Path):
    """The adaptive engine, its table at (batch_size, k) for k = 0..k_max, and its calibration record."""
    from adaspec.calibration import worst_case_progress_tokens

    cfg = workdir / "draft_step.json"
    span = args.prefill_tokens + worst_case_progress_tokens(args.warmup_steps, args.window_steps,
                                                            args.windows_per_point, args.k_max)
    cfg.write_text(json.dumps({"version": 1, "calibration": {
        "request_buckets": [args.batch_size],
        "contexts": [{"prefill_tokens": args.prefill_tokens, "min_kv_length": 1,
                      "max_kv_length": min(args.max_model_len, max(span, args.prompt_tokens + args.max_tokens))}],
        "warmup_steps": args.warmup_steps, "window_steps": args.window_steps,
        "windows_per_point": args.windows_per_point}}))
    llm = common.build_llm("float32", "MTP", args.k_max, None, max_seqs=args.batch_size,
                           max_model_len=args.max_model_len, enable_adaptive_draft_step=True,
                           adaptive_draft_step_config=str(cfg), graph_decode_batch_sizes=(args.batch_size,))
    ctl = llm.engine.control
    costs = [ctl.table.cost_ms(args.batch_size, k) for k in range(args.k_max + 1)]
    return llm, costs, {"calibration_seconds": ctl.calibration_seconds, "heldout": ctl.table.metadata.heldout}


def force_k(llm, k: int) -> None:
    """Make the adaptive engine run every round at k draft steps: a controller whose cost function
    prices k at 1 ms and every other step count at 10^6 ms, no probes."""
    from adaspec.adaptive.step_controller import DraftStepController

    ctl = llm.engine.control
    ctl.step = DraftStepController(ctl.width, cost_ms=lambda bcap, j: 1.0 if j == k else 1e6,
                                   pad_requests=ctl.geometry.pad_requests, lag=ctl.lag, probe_interval=0)


def serving_rounds(llm, prompts, args) -> dict:
    """CPU ms of every decode round that ran the whole batch, and the run's acceptance."""
    from adaspec.sampling_params import SamplingParams

    engine = llm.engine
    rec = common.RoundRecorder()
    engine.spec_stats = rec
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    for p in prompts:
        engine.add_request(list(p.ids), params)
    full = []
    while engine.has_unfinished():
        seen, c0 = rec.rounds, time.process_time()
        engine.step()
        ms = 1000 * (time.process_time() - c0)
        if rec.rounds == seen + 1 and rec.batch[-1] == args.batch_size:
            full.append(ms)
    used = full[args.skip_rounds:]
    return {"rounds": len(used), "median_ms": statistics.median(used) if used else None,
            "mean_acceptance_length": rec.summary().get("mean_acceptance_length")}


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(1)
    common.share_target_weights()
    info = common.run_info(args)
    print(f"# draft-step table against serving rounds: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        adaptive, table, calib = calibrated_costs(args, Path(tmp))
    common.log(f"[bench] table at bucket {args.batch_size}: " + ", ".join(f"k={k} {c:.1f} ms" for k, c in enumerate(table)))
    prompts = common.prompt_sets(adaptive.tokenizer, ["mixed"], args.batch_size, args.prompt_tokens, "auto")["mixed"]
    common.serve(adaptive, prompts[:2], 2, 4, ignore_eos=True)
    own = []
    for k in range(args.k_max + 1):
        force_k(adaptive, k)
        own.append(serving_rounds(adaptive, prompts, args))
        common.log(f"[bench] adaptive engine at k={k}: {own[-1]['rounds']} full-batch rounds, median {own[-1]['median_ms']:.1f} ms CPU")
    del adaptive  # one engine at a time from here
    served = []
    for k in range(args.k_max + 1):
        llm = common.build_llm("float32", "none" if k == 0 else "MTP", k or None, None,
                               max_seqs=args.batch_size, max_model_len=args.max_model_len)
        common.serve(llm, prompts[:2], 2, 4, ignore_eos=True)  # first-call costs out of the way
        served.append(serving_rounds(llm, prompts, args))
        common.log(f"[bench] k={k}: {served[-1]['rounds']} full-batch rounds, median {served[-1]['median_ms']:.1f} ms CPU")
        del llm
    rows = []
    for k, (c, a, s) in enumerate(zip(table, own, served)):
        ma, mf = a["median_ms"], s["median_ms"]
        rows.append([k, common.fmt(c), common.fmt_ratio(c / table[0]),
                     common.fmt(ma), common.fmt_ratio(ma / own[0]["median_ms"]), common.fmt_ratio(c / ma),
                     common.fmt(mf), common.fmt_ratio(mf / served[0]["median_ms"]), common.fmt_ratio(ma / mf),
                     f"{a['rounds']} / {s['rounds']}", common.fmt(s["mean_acceptance_length"], 2)])
    print(common.markdown_table(["k", "table ms", "table x k=0", "adaptive engine ms", "x k=0", "table / adaptive",
                                 "fixed engine ms", "x k=0", "adaptive / fixed", "rounds (adaptive / fixed)",
                                 "acceptance length (fixed)"], rows))
    if args.json_out:
        common.write_json(args.json_out, {"info": info, "args": vars(args), "table_ms": table, "adaptive_engine": own, "fixed_engines": served,
                                          "calibration": calib})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
