"""What an adaptive engine costs when every round is plain (issue 13, the plain floor).

Plain engine vs the adaptive DSpark (or MTP) verify engine with a cost function under which no
verified row ever pays and probes off, so every decoding round after the first (no feedback yet)
skips the draft: the difference is
the adaptive machinery's own per-round cost (the controller, the drafter's pending refresh entries,
captured target layers). Same process, alternating order, process CPU time.

    python bench/floor_overhead.py --cost_table=/tmp/adaptive_tables/dspark7_float32.json --repeats=4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--algorithm", default="DSpark", choices=("DSpark", "MTP"), help="draft of the adaptive engine")
    p.add_argument("--width", type=int, default=7, help="--num_speculative_tokens of the adaptive engine")
    p.add_argument("--cost_table", required=True,
                   help="a saved adaptive-verify cost table for that engine (bench/adaptive.py --table_dir writes one)")
    p.add_argument("--batch_size", type=int, default=1, help="requests running at once")
    p.add_argument("--num_prompts", type=int, default=2, help="held-out mixed prompts per run")
    p.add_argument("--max_tokens", type=int, default=128, help="tokens per request (end of sequence ignored)")
    p.add_argument("--repeats", type=int, default=4, help="alternating pairs of runs")
    args = p.parse_args(argv)
    from adaspec.adaptive.floor import PlainFloor

    common.setup_threads(1)
    buckets = tuple(sorted({1, 4, args.batch_size}))
    plain = common.build_llm("float32", max_seqs=max(buckets), max_model_len=512)
    adaptive = common.build_llm("float32", args.algorithm, args.width, None, max_seqs=max(buckets), max_model_len=512,
                                enable_adaptive_target_verify=True, adaptive_target_verify_cost_table=args.cost_table,
                                graph_decode_batch_sizes=buckets)
    stream = common.prompt_sets(plain.tokenizer, ["mixed"], args.num_prompts, 192, "auto")["mixed"][:args.num_prompts]

    def run(llm) -> tuple[float, list]:
        c = time.process_time()
        r = common.serve(llm, stream, args.batch_size, args.max_tokens, True)
        return time.process_time() - c, list(r.outputs)

    run(plain), run(adaptive)  # warm
    ctl = adaptive.engine.control
    times: dict[str, list[float]] = {"plain": [], "adaptive": []}
    for rep in range(args.repeats):
        for name in (("plain", "adaptive") if rep % 2 == 0 else ("adaptive", "plain")):
            if name == "adaptive":
                ctl.reset()
                ctl.verify.cost_ms = lambda bcap, G: 1.0 if G == bcap else 1e9  # noqa: E731 - nothing pays
                ctl.floor = PlainFloor(probe_interval=0)
            t, toks = run(plain if name == "plain" else adaptive)
            times[name].append(t)
            if name == "adaptive":  # the first `lag` rounds draft (no feedback yet), every later one skips
                assert ctl.floor.rounds - ctl.floor.skipped <= ctl.lag < ctl.floor.rounds, ctl.floor.summary()
    ratios = sorted(a / b for a, b in zip(times["plain"], times["adaptive"]))
    print(f"plain CPU s {times['plain']}\nadaptive (every round plain) CPU s {times['adaptive']}")
    print(f"throughput adaptive / plain per pair: {[round(r, 3) for r in ratios]}; median {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
