"""Plain vs adaptive target verify, each configuration in a fresh process (issue 13).

Inside one process, which engine was built when moves a run by several percent (BENCHMARKS.md,
issue 13 part B), more than the plain floor's own cost. This driver runs the same stream once per
configuration in a fresh child process, alternating the order over repeats, and compares the
children's process CPU time: baseline and candidate in the same (driver) run, without sharing one.

    taskset -c 1 python bench/floor_solo.py --cost_table=/tmp/adaptive_tables3/dspark7_float32.json --repeats=2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402


def child(args) -> None:
    """One configuration, one stream, in this process: prints one JSON line."""
    common.setup_threads(1)
    flags = {}
    if args.child == "adaptive":
        flags = dict(enable_adaptive_target_verify=True, adaptive_target_verify_cost_table=args.cost_table,
                     graph_decode_batch_sizes=(1, 4))
    llm = (common.build_llm("float32", args.algorithm, args.width, None, max_seqs=4, max_model_len=512, **flags)
           if args.child == "adaptive" else common.build_llm("float32", max_seqs=4, max_model_len=512))
    stream = common.prompt_sets(llm.tokenizer, [args.source], args.num_prompts, 192, "auto")[args.source]
    stream = stream[:args.num_prompts]
    common.serve(llm, stream[:1], 1, 16, True, temperature=args.temperature)  # warm
    if llm.engine.control is not None:
        llm.engine.control.reset()
    c = time.process_time()
    run = common.serve(llm, stream, args.batch_size, args.max_tokens, True, temperature=args.temperature)
    out = {"config": args.child, "cpu_s": time.process_time() - c, "tokens": run.tokens, "outputs": run.outputs}
    if llm.engine.control is not None:
        out["floor"] = llm.engine.control.summary()
    print(json.dumps(out))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--algorithm", default="DSpark", choices=("DSpark", "MTP"), help="draft of the adaptive engine")
    p.add_argument("--width", type=int, default=7, help="--num_speculative_tokens of the adaptive engine")
    p.add_argument("--cost_table", required=True, help="a saved adaptive-verify cost table for that engine")
    p.add_argument("--source", default="mixed", help="held-out prompt stream: code, chat, prose, mixed")
    p.add_argument("--batch_size", type=int, default=1, help="requests running at once")
    p.add_argument("--num_prompts", type=int, default=4, help="prompts in the stream")
    p.add_argument("--max_tokens", type=int, default=256, help="tokens per request (end of sequence ignored)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0: greedy; > 0: random sampling with per-request seeds (outputs still comparable)")
    p.add_argument("--repeats", type=int, default=2, help="pairs of child runs, order alternating")
    p.add_argument("--child", default=None, choices=("plain", "adaptive"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return 0
    base = [sys.executable, str(Path(__file__).resolve())] + [a for a in (argv or sys.argv[1:])]
    times: dict[str, list[float]] = {"plain": [], "adaptive": []}
    outputs = {}
    for rep in range(args.repeats):
        for name in (("plain", "adaptive") if rep % 2 == 0 else ("adaptive", "plain")):
            res = subprocess.run(base + [f"--child={name}"], capture_output=True, text=True, check=True)
            r = json.loads(res.stdout.strip().splitlines()[-1])
            times[name].append(r["cpu_s"])
            outputs[name] = r["outputs"]
            print(f"rep {rep + 1} {name:8s} {r['tokens']} tok {r['cpu_s']:.2f} s CPU"
                  + (f"  floor {r['floor']}" if "floor" in r else ""), flush=True)
    ratios = sorted(a / b for a, b in zip(times["plain"], times["adaptive"]))
    same = outputs["plain"] == outputs["adaptive"]
    print(f"throughput adaptive / plain per pair: {[round(x, 3) for x in ratios]}; median "
          f"{statistics.median(ratios):.3f}; {'greedy' if args.temperature == 0 else 'seeded'} output equal: {same}")
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
