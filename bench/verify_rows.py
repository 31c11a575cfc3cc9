"""What sampling verify rows only up to the first rejection saves at temperature > 0 (issue 13).

One engine per configuration; every run serves the same held-out prompts (seeded, `--temperature`), in
alternating order with the round runner sampling every verify row (`rows_until_rejected` off, the
behaviour before sampling/verify_rows.py) and only the rows that can matter (on, the default). Same
engine object, same process: the ratio is the change alone. Seeded outputs must be equal.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/verify_rows.py --configs=mtp1,mtp2,mtp3 --batch_sizes=1,4
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import log, markdown_table  # noqa: E402
from bench.speculative import parse_config  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configs", default="mtp1,mtp2,mtp3",
                   help="comma-separated fixed speculation settings, named as bench/speculative.py names them (mtp<k>, dspark5, ...)")
    p.add_argument("--batch_sizes", default="1,4", help="comma-separated: requests running at once")
    p.add_argument("--source", default="mixed", help="held-out prompt stream: code, chat, prose or mixed")
    p.add_argument("--num_prompts", type=int, default=4, help="prompts per run")
    p.add_argument("--max_tokens", type=int, default=256, help="tokens per request (end of sequence ignored)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (> 0; request i has seed i)")
    p.add_argument("--repeats", type=int, default=2, help="pairs of runs (off, on) in alternating order")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    if not args.temperature > 0:
        p.error(f"--temperature must be > 0 (greedy rows are not affected), got {args.temperature}")
    if min(args.num_prompts, args.max_tokens, args.repeats) < 1:
        p.error("--num_prompts, --max_tokens and --repeats must be >= 1")
    args.configs = [c for c in args.configs.split(",") if c]
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    for c in args.configs:
        if parse_config(c)[0] == "none":
            p.error("--configs: plain decoding verifies no draft rows; name speculative settings (mtp<k>, dspark<w>, ...)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(1)
    info = common.run_info(args)
    print(f"# verify rows until the first rejection: {info['machine']}; torch {info['torch']}; {info['date']}; "
          f"T={args.temperature}, {args.num_prompts} {args.source} prompts x {args.max_tokens} tokens", flush=True)
    body, results = [], []
    for config in args.configs:
        algo, width = parse_config(config)
        llm = common.build_llm("float32", algo, width, max_seqs=max(args.batch_sizes))
        prompts = common.prompt_sets(llm.tokenizer, [args.source], args.num_prompts, 192, "auto")[args.source]
        runner = llm.engine.rounds
        for B in args.batch_sizes:
            common.serve(llm, prompts[:1], 1, 8, True, temperature=args.temperature)  # warm
            cpu = {False: [], True: []}
            outs = {}
            for rep in range(args.repeats):
                for on in ((False, True) if rep % 2 == 0 else (True, False)):
                    runner.rows_until_rejected = on
                    run = common.serve(llm, prompts, B, args.max_tokens, True, temperature=args.temperature)
                    cpu[on].append(run.cpu_s)
                    outs[on] = run.outputs
                    log(f"[bench] {config} B={B} rep {rep + 1} {'on ' if on else 'off'} {run.cpu_s:.2f} s CPU")
            runner.rows_until_rejected = True
            med = {on: statistics.median(v) for on, v in cpu.items()}
            pairs = [a / b for a, b in zip(cpu[False], cpu[True])]
            equal = outs[False] == outs[True]
            body.append([config, B, f"{med[False]:.2f}", f"{med[True]:.2f}", f"{med[False] / med[True]:.3f}",
                         " ".join(f"{r:.3f}" for r in pairs), "yes" if equal else "NO"])
            results.append({"config": config, "B": B, "cpu_s": {"off": cpu[False], "on": cpu[True]}, "equal": equal})
    print(markdown_table(["config", "B", "all rows: CPU s", "until rejected: CPU s", "speed-up", "per pair",
                          "outputs equal"], body, "lrrrrll"))
    if args.json_out:
        common.write_json(args.json_out, {"info": info, "results": results})
    return 0 if all(r["equal"] for r in results) else 1


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()
    sys.exit(main())
