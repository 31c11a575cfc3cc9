"""What random sampling costs per row and per round, against the sampler it replaced (issue 13, R-I1).

A speculative round samples 1 + k target rows per request, plain decoding one, and the cost tables
are calibrated with greedy requests. So a sampler that costs much per row makes speculation at
T > 0 dearer than its table says. In one process:

- `kernel`: `adaspec.sampling.sampler.sample` (inverse transform, one uniform per row) against the
  exponential race it replaced (`argmax p / E`, E ~ Exponential(1) per vocabulary entry, kept
  below as the baseline), on [R, vocab] logits at temperature 0.8 with one seeded generator per
  row, as the round runner calls it. Prints CPU ms per row and the ratio.
- `engine`: the bundled model, plain and MTP k = 1..--k_max at batch 1, held-out code prompts,
  greedy and --temperature in alternating order; CPU ms per decode round and the ratio
  temperature / greedy (1.00 = sampling adds nothing the greedy table misses).

    OMP_NUM_THREADS=1 taskset -c 0 python bench/sampling_cost.py --json_out=bench/results/sampling_cost.json
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
from bench.common import fmt, markdown_table  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="per-row and per-round cost of random sampling",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--parts", default="kernel,engine", help="comma-separated: kernel, engine")
    p.add_argument("--rows", default="1,4,16", help="kernel: rows per sample() call")
    p.add_argument("--calls", type=int, default=200, help="kernel: timed calls per cell")
    p.add_argument("--k_max", type=int, default=3, help="engine: MTP k = 1..k_max besides plain")
    p.add_argument("--num_prompts", type=int, default=2, help="engine: held-out code prompts")
    p.add_argument("--max_tokens", type=int, default=256, help="engine: tokens per request (end of sequence ignored)")
    p.add_argument("--temperature", type=float, default=0.8, help="the random-sampling temperature")
    p.add_argument("--repeats", type=int, default=3, help="engine: alternating repeats (medians)")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    args.parts = common.parse_list(args.parts, str, ("kernel", "engine"), name="parts")
    args.rows = common.parse_list(args.rows, int, name="rows")
    if args.temperature <= 0:
        p.error("--temperature must be > 0 (the greedy runs are the baseline)")
    return args


def exponential_race(logits, t, generators):
    """The replaced sampler's random rows: argmax p / E with a vocabulary of Exponential(1) noise per row."""
    import torch

    from adaspec.sampling.sampler import _filtered_logits

    probs = _filtered_logits(logits, t).softmax(dim=-1)
    noise = torch.empty_like(probs)
    for i, g in enumerate(generators):
        noise[i].exponential_(generator=g)
    noise.clamp_(min=torch.finfo(noise.dtype).tiny)
    return (probs / noise).max(dim=-1).indices


def kernel(args) -> list[dict]:
    import torch

    from adaspec.sampling.sampler import SamplingTensors, sample
    from adaspec.sampling.seeding import row_generators
    from adaspec.sampling_params import SamplingParams

    vocab = 49152
    out = []
    for rows in args.rows:
        logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rows)) * 3
        params = [SamplingParams(temperature=args.temperature, max_tokens=1, seed=i) for i in range(rows)]
        t = SamplingTensors.from_params(params)
        positions = list(range(100, 100 + rows))
        fns = {"inverse transform (now)": lambda: sample(logits, t, row_generators([p.seed for p in params], positions, "cpu")),
               "exponential race (before)": lambda: exponential_race(logits, t, row_generators(
                   [p.seed for p in params], positions, "cpu"))}
        ms = {}
        for name, fn in fns.items():
            for _ in range(10):
                fn()
            c = time.process_time()
            for _ in range(args.calls):
                fn()
            ms[name] = (time.process_time() - c) / args.calls * 1e3 / rows
        now, before = ms["inverse transform (now)"], ms["exponential race (before)"]
        out.append({"rows": rows, "now_ms_per_row": now, "before_ms_per_row": before, "ratio": now / before})
    return out


def engine(args) -> list[dict]:
    configs = [("plain", "none", None)] + [(f"mtp_k{k}", "MTP", k) for k in range(1, args.k_max + 1)]
    llms = {name: common.build_llm("float32", algo, k, None, max_seqs=1, max_model_len=512) for name, algo, k in configs}
    stream = common.prompt_sets(next(iter(llms.values())).tokenizer, ["code"], args.num_prompts, 192, "auto")["code"]
    stream = stream[:args.num_prompts]
    ms: dict = {}
    for rep in range(args.repeats):
        order = configs if rep % 2 == 0 else configs[::-1]
        for name, _, _ in order:
            llm = llms[name]
            common.serve(llm, stream[:1], 1, 16, True)  # warm
            temps = (0.0, args.temperature) if rep % 2 == 0 else (args.temperature, 0.0)
            for temp in temps:
                run = common.serve(llm, stream, 1, args.max_tokens, True, temperature=temp)
                rounds = run.stats["decode_rounds"]
                ms.setdefault((name, temp), []).append(run.cpu_s / rounds * 1e3)
                print(f"[bench] repeat {rep + 1} {name} T={temp:g}: {run.cpu_s / rounds * 1e3:.2f} ms/round "
                      f"({rounds} rounds, {run.tokens / rounds:.2f} tokens/round)", flush=True)
    out = []
    for name, _, _ in configs:
        greedy, rand = statistics.median(ms[name, 0.0]), statistics.median(ms[name, args.temperature])
        out.append({"config": name, "greedy_ms_per_round": greedy, "random_ms_per_round": rand,
                    "ratio": rand / greedy, "repeats": {"greedy": ms[name, 0.0], "random": ms[name, args.temperature]}})
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(1)
    info = common.run_info(args)
    print(f"# sampling cost: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    payload = {"info": info}
    if "kernel" in args.parts:
        payload["kernel"] = kernel(args)
        print(markdown_table(["rows", "now ms/row", "before ms/row", "now / before"],
                             [[r["rows"], fmt(r["now_ms_per_row"], 3), fmt(r["before_ms_per_row"], 3), fmt(r["ratio"], 2)]
                              for r in payload["kernel"]]), flush=True)
    if "engine" in args.parts:
        payload["engine"] = engine(args)
        print(markdown_table(["config", "greedy ms/round", f"T={args.temperature:g} ms/round", "ratio"],
                             [[r["config"], fmt(r["greedy_ms_per_round"], 2), fmt(r["random_ms_per_round"], 2),
                               fmt(r["ratio"], 3)] for r in payload["engine"]]), flush=True)
    if args.json_out:
        common.write_json(args.json_out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
