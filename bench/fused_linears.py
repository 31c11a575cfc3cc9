"""Fused q|k|v and gate|up products against separate ones, in one process (issue 14).

Two engines on the same backend (default fp16w), one built with `PackedLinear.fusable` switched off
(today's separate products), one as shipped (models/linear.fuse). For each configuration (plain
decode at each --batch_sizes, and MTP k=--mtp_k at batch 1) both engines decode the same held-out
code prompts; every measurement = --steps engine steps after prefill and warm-up, timed in process
CPU time; the engines alternate, --repeats times, and medians are reported. Greedy tokens are
compared (the fused model must compute the same bits, so they must be equal).

The pair is built twice, in both orders, and measured --repeats times each: on this machine an
engine built second in a process ran up to ~7% slower or faster than the first in code both share
(the LM head), a placement effect that would otherwise count for or against fusion.

    taskset -c 0 python bench/fused_linears.py --json_out=bench/results/fused_linears.json
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
from bench.common import log, markdown_table  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="fused vs separate q|k|v and gate|up products, same process, CPU time",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--linear_backend", default="fp16w", choices=("fp16w", "int8"), help="a backend that fuses")
    p.add_argument("--batch_sizes", default="1,8", help="plain-decode batch sizes (comma-separated)")
    p.add_argument("--mtp_k", type=int, default=1, help="MTP draft steps of the speculative configuration (0: none)")
    p.add_argument("--steps", type=int, default=40, help="engine steps per measurement")
    p.add_argument("--repeats", type=int, default=3, help="measurements per engine and build order, alternating")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    try:
        args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    except ValueError:
        p.error(f"--batch_sizes={args.batch_sizes!r}: give comma-separated integers, e.g. --batch_sizes=1,8")
    if not args.batch_sizes or min(args.batch_sizes) < 1:
        p.error("--batch_sizes: every batch size must be at least 1")
    if args.steps < 1 or args.repeats < 1 or args.mtp_k < 0:
        p.error("--steps and --repeats must be at least 1, --mtp_k at least 0")
    return args


def build(fused: bool, algo: str, k, batch: int, backend: str):
    from adaspec.models import linear

    cls = linear._CLASSES[backend]
    saved = cls.fusable
    cls.fusable = fused and saved
    try:
        return common.build_llm("float32", algo, k, max_seqs=batch, max_model_len=1024, linear_backend=backend)
    finally:
        cls.fusable = saved


def measure(llm, prompts, steps: int) -> tuple[float, float, list]:
    """(CPU ms per step, tokens per step, greedy tokens) over `steps` steps after prefill + 4."""
    from adaspec.sampling_params import SamplingParams

    eng = llm.engine
    ids = [eng.add_request(list(p.ids), SamplingParams(temperature=0, max_tokens=steps * 8 + 40, ignore_eos=True))
           for p in prompts]
    while not all(r.prefilled for r in eng.requests.values()):
        eng.step()
    for _ in range(4):
        eng.step()
    n0 = sum(len(r.output_token_ids) for r in eng.requests.values())
    c0 = time.process_time()
    for _ in range(steps):
        eng.step()
    cpu = (time.process_time() - c0) / steps
    tokens = [list(eng.requests[i].output_token_ids) for i in ids]
    per_step = (sum(len(t) for t in tokens) - n0) / steps
    for rid in list(eng.requests):
        eng.abort(rid)
    return 1000 * cpu, per_step, tokens


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(1)
    info = common.run_info(args)
    print(f"# fused vs separate products: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    configs = [(f"plain B={b}", "none", None, b) for b in args.batch_sizes]
    if args.mtp_k:
        configs.append((f"MTP k={args.mtp_k} B=1", "MTP", args.mtp_k, 1))
    rows, result = [], {"info": info, "configs": {}}
    for name, algo, k, batch in configs:
        ms = {"separate": [], "fused": []}
        toks, per_step = {}, {}
        for built in (("separate", "fused"), ("fused", "separate")):
            engines = {e: build(e == "fused", algo, k, batch, args.linear_backend) for e in built}
            prompts = common.load_prompts(engines["fused"].tokenizer, "code", batch)
            for r in range(args.repeats):
                for e in (built if r % 2 == 0 else built[::-1]):
                    t, s, toks[e] = measure(engines[e], prompts, args.steps)
                    ms[e].append(t)
                    per_step[e] = s
                log(f"[bench] {name} built {'+'.join(built)} rep {r + 1}: separate {ms['separate'][-1]:.2f} ms, "
                    f"fused {ms['fused'][-1]:.2f} ms")
            del engines
        med = {e: statistics.median(v) for e, v in ms.items()}
        same = toks["separate"] == toks["fused"]
        result["configs"][name] = {"ms": ms, "median_ms": med, "tokens_per_step": per_step, "tokens_equal": same}
        rows.append([name, f"{med['separate']:.2f}", f"{med['fused']:.2f}", f"{med['separate'] / med['fused']:.3f}×",
                     f"{min(ms['separate']):.2f} / {min(ms['fused']):.2f}", f"{per_step['fused']:.2f}",
                     "yes" if same else "NO"])
    print(f"\n### CPU ms per engine step on {args.linear_backend}, medians of 2 × {args.repeats} × {args.steps} steps (both build orders)\n")
    print(markdown_table(["configuration", "separate", "fused", "speed-up", "min separate / fused", "tokens per step",
                          "tokens equal"], rows, "lrrrrrl"))
    if args.json_out:
        common.write_json(args.json_out, result)
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
