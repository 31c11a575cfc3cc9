"""Tensor and data parallel against one process, on this machine (issue 12).

In one script run, each topology (`--topologies`, default tp1, tp2, dp2) serves the same held-out
code prompts greedily, `--max_tokens` new tokens each (EOS ignored), at each batch size B (groups
of B prompts per `LLM.generate` call), `--repeats` times in alternating order; the median wall
time gives output tokens/s and the ratio to tp1. Wall time, not process CPU time: the work of a
parallel engine is spread over processes. Every rank runs `--threads` threads, so tp2/dp2 use
twice the cores of tp1 (on a 2-vCPU machine: both). Each topology and repeat runs in a fresh
process (a process holds one parallel engine at a time). Token agreement with tp1 is reported (TP may
differ where its reduction order flips a near-tie).

    python bench/parallel.py --batch_sizes=1,4 --max_tokens=128 --repeats=3
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

from bench.common import compare_tokens, load_prompts, log, machine, markdown_table, parse_list, write_json  # noqa: E402

# in --one mode this file is the main module of spawned ranks too: everything runs under main()

TOPOLOGIES = {"tp1": {}, "tp2": {"tp_size": 2}, "dp2": {"dp_size": 2}}


def measure_one(args, name: str, sizes: list[int]) -> dict:
    """One topology in this process: {B: (seconds, tokens)}."""
    from adaspec import LLM, SamplingParams

    llm = LLM(max_seqs_per_batch=max(sizes), threads=args.threads, linear_backend=args.linear_backend,
              speculative_algorithm=args.speculative_algorithm, **TOPOLOGIES[name])
    prompts = [list(q.ids) for q in load_prompts(llm.tokenizer, "code", args.prompts)]
    sp = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    out = {}
    for B in sizes:
        t0 = time.perf_counter()
        outs = []
        for g in range(0, len(prompts), B):
            outs += llm.generate(prompts[g:g + B], sp)
        out[B] = (time.perf_counter() - t0, [o.token_ids for o in outs])
    llm.close()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--topologies", default="tp1,tp2,dp2", help="comma list of tp1, tp2, dp2 (default all three)")
    p.add_argument("--batch_sizes", default="1,4", help="comma list of batch sizes B (default 1,4)")
    p.add_argument("--prompts", type=int, default=4, help="held-out code prompts (default 4)")
    p.add_argument("--max_tokens", type=int, default=128, help="new tokens per request (default 128)")
    p.add_argument("--repeats", type=int, default=3, help="measurements per cell, alternating order (default 3)")
    p.add_argument("--speculative_algorithm", default="none", help="none | MTP | DSpark (fixed width; default none)")
    p.add_argument("--linear_backend", default="auto", help="engine --linear_backend (default auto)")
    p.add_argument("--threads", type=int, default=1, help="threads per rank (default 1)")
    p.add_argument("--json_out", default=None, help="also write the results as JSON here")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: measure one topology, print JSON
    args = p.parse_args(argv)
    topologies = parse_list(args.topologies, str, list(TOPOLOGIES), "--topologies")
    sizes = parse_list(args.batch_sizes, int, None, "--batch_sizes")
    if args.one:
        print(json.dumps(measure_one(args, args.one, sizes)))
        return 0
    # one process per topology and repeat: a process holds one parallel engine at a time
    times = {(n, B): [] for n in topologies for B in sizes}
    tokens = {}
    passthrough = [a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--json_out")]
    for r in range(args.repeats):
        for name in (topologies if r % 2 == 0 else topologies[::-1]):
            res = subprocess.run([sys.executable, __file__, *passthrough, f"--one={name}"], capture_output=True,
                                 text=True, check=True)
            for B, (t, toks) in json.loads(res.stdout.strip().splitlines()[-1]).items():
                times[(name, int(B))].append(t)
                tokens[(name, int(B))] = toks
                log(f"[bench] repeat {r} B={B} {name}: {t:.1f} s")
    rows, results = [], []
    total = args.prompts * args.max_tokens
    for B in sizes:
        base = statistics.median(times[(topologies[0], B)])
        for name in topologies:
            t = statistics.median(times[(name, B)])
            same = compare_tokens(tokens[(topologies[0], B)], tokens[(name, B)])
            rows.append([B, name, f"{total / t:.1f}", f"{base / t:.2f}x", f"{same['equal']}/{same['sequences']}"])
            results.append({"B": B, "topology": name, "tok_s": total / t, "ratio": base / t, "tokens": same})
    print(f"machine: {machine()}; {args.prompts} held-out code prompts x {args.max_tokens} tokens, greedy, "
          f"{args.speculative_algorithm}, {args.threads} thread(s) per rank, median of {args.repeats} (wall, "
          "model load excluded)")
    print(markdown_table(["B", "topology", "tok/s (wall)", f"vs {topologies[0]}", "same tokens"], rows))
    if args.json_out:
        write_json(args.json_out, {"args": vars(args), "results": results})
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
