"""What random sampling costs per row and per round, and how robust it is (issue 13, R-I1, R-B5).

A speculative round samples 1 + k target rows per request, plain decoding one, and the cost tables
are calibrated with greedy requests. So a sampler that costs much per row makes speculation at
T > 0 dearer than its table says. In one process:

- `kernel`: `adaspec.sampling.sampler.sample` (exponential race, noise from float64 `rand` +
  `log1p`) against the same race with `Tensor.exponential_` noise (the sampler before issue 13's
  change) and against inverse-transform sampling (one uniform per row: cheapest, not adopted), on
  [R, vocab] logits at --temperature with one seeded generator per row, as the round runner calls
  it. CPU ms per row.
- `robustness`: a verify row's logits are not always bit-identical to the plain row's. One held-out
  mixed prompt is decoded seeded at --temperature by plain and by MTP k = 3, the logits of every
  sampled row are recorded, and on the rows of equal prefix (before any divergence) each method
  samples both logit rows with the same noise many times: the share of draws whose token differs
  is how often seeded speculative output would leave seeded plain output.
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
    p.add_argument("--parts", default="kernel,robustness,engine", help="comma-separated: kernel, robustness, engine")
    p.add_argument("--rows", default="1,4,16", help="kernel: rows per sample() call")
    p.add_argument("--calls", type=int, default=200, help="kernel: timed calls per cell")
    p.add_argument("--draws", type=int, default=2000, help="robustness: noise draws per recorded row and method")
    p.add_argument("--k_max", type=int, default=3, help="engine: MTP k = 1..k_max besides plain")
    p.add_argument("--num_prompts", type=int, default=2, help="engine: held-out code prompts")
    p.add_argument("--max_tokens", type=int, default=256, help="engine: tokens per request (end of sequence ignored)")
    p.add_argument("--temperature", type=float, default=0.8, help="the random-sampling temperature")
    p.add_argument("--repeats", type=int, default=3, help="engine: alternating repeats (medians)")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    args.parts = common.parse_list(args.parts, str, ("kernel", "robustness", "engine"), name="parts")
    args.rows = common.parse_list(args.rows, int, name="rows")
    if args.temperature <= 0:
        p.error("--temperature must be > 0 (the greedy runs are the baseline)")
    return args


def race_exponential_(probs, generators):
    """The race with `Tensor.exponential_` noise: the sampler before issue 13's change."""
    import torch

    noise = torch.empty_like(probs)
    for i, g in enumerate(generators):
        noise[i].exponential_(generator=g)
    return (probs / noise.clamp_(min=torch.finfo(noise.dtype).tiny)).max(dim=-1).indices


def inverse_tokens(probs_row, u):
    """Inverse-transform picks of one row for uniforms `u` ([n] float64): the first index whose
    float64 cumulative probability exceeds u times the row's total (kept below the total)."""
    import torch

    cum = probs_row.to(torch.float64).cumsum(0)
    return torch.searchsorted(cum, torch.minimum(u * cum[-1:], torch.nextafter(cum[-1:], cum[:1] * 0)), right=True)


def inverse_transform(probs, generators):
    """One float64 uniform per row against the row's float64 cumulative sum (not adopted)."""
    import torch

    out = torch.empty(probs.shape[0], dtype=torch.long)
    for i, g in enumerate(generators):
        out[i] = inverse_tokens(probs[i], torch.rand(1, dtype=torch.float64, generator=g))[0]
    return out


def kernel(args) -> list[dict]:
    import torch

    from adaspec.sampling.sampler import SamplingTensors, _filtered_logits, sample
    from adaspec.sampling.seeding import row_generators
    from adaspec.sampling_params import SamplingParams

    vocab = 49152
    out = []
    for rows in args.rows:
        logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rows)) * 3
        params = [SamplingParams(temperature=args.temperature, max_tokens=1, seed=i) for i in range(rows)]
        t = SamplingTensors.from_params(params)
        seeds, positions = [p.seed for p in params], list(range(100, 100 + rows))

        def probs():
            return _filtered_logits(logits, t).softmax(dim=-1)
        fns = {"now": lambda: sample(logits, t, row_generators(seeds, positions, "cpu")),
               "exponential_": lambda: race_exponential_(probs(), row_generators(seeds, positions, "cpu")),
               "inverse": lambda: inverse_transform(probs(), row_generators(seeds, positions, "cpu"))}
        ms = {}
        for name, fn in fns.items():
            for _ in range(10):
                fn()
            c = time.process_time()
            for _ in range(args.calls):
                fn()
            ms[name] = (time.process_time() - c) / args.calls * 1e3 / rows
        out.append({"rows": rows, **{f"{k}_ms_per_row": v for k, v in ms.items()}})
    return out


def robustness(args) -> dict:
    import torch

    import adaspec.runner.round_runner as rr
    from adaspec.sampling.sampler import exponential_noise

    recorded: dict = {}
    real_sample = rr.sample

    def recording_sample(logits, t, generators, default_generator=None):  # bench-side wrapper, one engine at a time
        y = real_sample(logits, t, generators, default_generator=default_generator)
        recorded.setdefault("rows", []).append(logits.clone())
        return y
    rr.sample = recording_sample
    try:
        runs = {}
        for name, algo, k in (("plain", "none", None), ("mtp_k3", "MTP", 3)):
            llm = common.build_llm("float32", algo, k, None, max_seqs=1, max_model_len=512)
            prompt = common.prompt_sets(llm.tokenizer, ["mixed"], 2, 192, "auto")["mixed"][1]
            recorded.clear()
            run = common.serve(llm, [prompt], 1, 96, True, temperature=args.temperature)
            rows = torch.cat(recorded["rows"])  # prefill's last row, then every sampled row in order
            runs[name] = (run.outputs[0], rows)
    finally:
        rr.sample = real_sample
    plain_out, plain_rows = runs["plain"]
    spec_out, spec_rows = runs["mtp_k3"]
    same = next((j for j, (a, b) in enumerate(zip(plain_out, spec_out)) if a != b), len(plain_out))
    # the row that samples output token j: plain's j-th sampled row; the speculative run's is the one whose
    # sampled token was j-th committed, found by matching logits within 1e-3 to plain's row for the same j
    pairs = []
    cursor = 0
    for j in range(same):
        a = plain_rows[j]
        while cursor < spec_rows.shape[0] and (spec_rows[cursor] - a).abs().max() > 1e-3:
            cursor += 1
        if cursor == spec_rows.shape[0]:
            break
        pairs.append((a, spec_rows[cursor]))
        cursor += 1
    g = torch.Generator().manual_seed(0)
    flips = {"race": 0, "inverse": 0}
    differing = sum(not torch.equal(a, b) for a, b in pairs)
    for a, b in pairs:
        pa, pb = ((x.float() / args.temperature).softmax(-1) for x in (a, b))
        u = torch.rand(args.draws, dtype=torch.float64, generator=g)
        flips["inverse"] += int((inverse_tokens(pa, u) != inverse_tokens(pb, u)).sum())
        for start in range(0, args.draws, 100):
            e = exponential_noise((min(100, args.draws - start), pa.shape[0]), g, "cpu")
            flips["race"] += int(((pa / e).max(-1).indices != (pb / e).max(-1).indices).sum())
    draws = len(pairs) * args.draws
    max_diff = max(((a - b).abs().max().item() for a, b in pairs), default=0.0)
    return {"rows_compared": len(pairs), "rows_not_bit_identical": differing, "max_abs_logit_diff": max_diff,
            "draws_per_method": draws, "flip_share": {k: v / draws if draws else None for k, v in flips.items()},
            "flips": flips, "outputs_equal_tokens": same}


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
        print(markdown_table(["rows", "race, rand + log1p (now) ms/row", "race, exponential_ (before)", "inverse transform"],
                             [[r["rows"], fmt(r["now_ms_per_row"], 3), fmt(r["exponential__ms_per_row"], 3),
                               fmt(r["inverse_ms_per_row"], 3)] for r in payload["kernel"]]), flush=True)
    if "robustness" in args.parts:
        r = payload["robustness"] = robustness(args)
        print(f"robustness: {r['rows_compared']} plain / MTP k=3 row pairs of equal prefix, "
              f"{r['rows_not_bit_identical']} not bit-identical (max |dlogit| {r['max_abs_logit_diff']:.2e}); "
              f"token differs in {r['flips']['race']} of {r['draws_per_method']} draws with the race, "
              f"{r['flips']['inverse']} with the inverse transform", flush=True)
    if "engine" in args.parts:
        payload["engine"] = engine(args)
        print(markdown_table(["config", "greedy ms/round", f"T={args.temperature:g} ms/round", "ratio"],
                             [[r["config"], fmt(r["greedy_ms_per_round"], 2), fmt(r["random_ms_per_round"], 2),
                               fmt(r["ratio"], 3)] for r in payload["engine"]]), flush=True)
    if args.json_out:
        common.write_json(args.json_out, payload)
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
