"""Linear backends on the bundled model: per-M kernel cost and the quality report (issue 14).

Part 1, kernels. Every linear layer of the target (30 x 7 + the LM head, real weights, in model
order, so they stream from memory as in a forward) is run with M = 1, 2, 4, 6, 8, 16 input rows on
each backend: fp32 (MKL, column-major weights, today's), fp16w (FBGEMM fp16 weights through
`torch.fbgemm_linear_fp16_weight`, and through its fallback `torch.ops.quantized.linear_dynamic_fp16`),
bf16, int8 (per-row int8, adaspec's), and for reference FBGEMM's dynamic int8 with one activation
scale for the whole batch (`torch.ops.quantized.linear_dynamic`, not offered: rows interact).
Backends alternate inside every repeat; medians of --repeats passes, wall and process CPU time.
Row independence (linear.row_independent) is checked on every distinct shape.

Part 2, quality against the engine before issue 14 (fp32 linears, torch's layer ops: `fp32:torch`),
for each --quality_engines entry LINEAR:KERNELS (its `--linear_backend` and `--layer_kernels`):
- teacher-forced logits over held-out prose and code passages (--ppl_tokens tokens each): max and
  mean |logit difference| against the reference, and the perplexity of the passage;
- greedy decoding of held-out code, chat and prose prompts, --max_tokens each at batch 1: sequences
  identical to the reference's, and the first divergence position of every prompt.

    taskset -c 0 python bench/linear_backends.py --json_out=bench/results/linear_backends.json
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import fmt, log, markdown_table  # noqa: E402

ROWS = (1, 2, 4, 6, 8, 16, 32, 64)
QUALITY_REFERENCE = "fp32:torch"
QUALITY_ENGINES = "fp32:native,fp16w:native,fp16w:torch,bf16:native,int8:native"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="linear backends: per-M kernel cost and quality against fp32",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--repeats", type=int, default=7, help="timed passes per backend and M (medians reported)")
    p.add_argument("--num_prompts", type=int, default=4, help="held-out prompts per source for the greedy comparison")
    p.add_argument("--max_tokens", type=int, default=128, help="greedy tokens per prompt (end of sequence ignored)")
    p.add_argument("--ppl_passages", type=int, default=3, help="held-out passages per source (prose, code) for perplexity")
    p.add_argument("--ppl_tokens", type=int, default=512, help="tokens per perplexity passage")
    p.add_argument("--parts", default="kernels,quality", help="comma-separated: kernels, quality")
    p.add_argument("--quality_engines", default=QUALITY_ENGINES,
                   help=f"comma-separated LINEAR:KERNELS engines (--linear_backend:--layer_kernels) compared with "
                        f"{QUALITY_REFERENCE} in the quality part")
    p.add_argument("--json_out", default=None, help="write all results to this JSON file")
    args = p.parse_args(argv)
    args.parts = common.parse_list(args.parts, str, ("kernels", "quality"), name="parts")
    args.quality_engines = common.parse_list(args.quality_engines, str, name="quality_engines")
    for e in args.quality_engines:
        linear, _, kernels = e.partition(":")
        if linear not in ("fp32", "fp16w", "bf16", "int8") or kernels not in ("native", "torch"):
            p.error(f"--quality_engines: {e!r} is not LINEAR:KERNELS (fp32|fp16w|bf16|int8 : native|torch)")
    return args


# ---- part 1: kernels ------------------------------------------------------------------------------
def kernel_fns(weights):
    import torch
    import torch.nn.functional as F

    from adaspec.models import linear, native_gemm

    fns = {"fp32": [(lambda x, w=w: F.linear(x, w)) for w in weights]}
    for b in ("fp16w", "bf16", "int8"):
        if linear.unavailable_reason(b) is None:
            fns[b] = [linear.pack_linear(w, None, b) for w in weights]
    if "fp16w" in fns and native_gemm.unavailable() is None:  # fp16w as --layer_kernels=native runs it
        mods = [linear.pack_linear(w, None, "fp16w") for w in weights]
        for mod in mods:  # at every row count it may serve, so that its own per-M cost shows (FBGEMM above)
            native_gemm.attach(mod, rows=range(1, native_gemm.MAX_ROWS + 1))
        fns[f"fp16w, adaspec's kernel at 1-{native_gemm.MAX_ROWS} rows"] = mods
    if linear.fp16w_implementation() == "torch.fbgemm_linear_fp16_weight":
        packs = [torch.ops.quantized.linear_prepack_fp16(w.contiguous(), None) for w in weights]
        fns["fp16w (linear_dynamic_fp16)"] = [(lambda x, p=p: torch.ops.quantized.linear_dynamic_fp16(x, p))
                                              for p in packs]
    q = []
    for w in weights:
        scale = w.abs().amax(1).double() / 127
        qw = torch.quantize_per_channel(w.contiguous(), scale, torch.zeros(len(scale), dtype=torch.long), 0, torch.qint8)
        q.append(torch.ops.quantized.linear_prepack(qw, None))
    fns["int8 per-batch scale (fbgemm dynamic, not offered)"] = [
        (lambda x, p=p: torch.ops.quantized.linear_dynamic(x, p, False)) for p in q]
    return fns


def run_kernels(args, target) -> dict:
    import torch

    from adaspec.models.linear import row_independent

    weights = [m.weight.detach() for m in target.modules() if isinstance(m, torch.nn.Linear)]
    log(f"[bench] kernels: {len(weights)} linear weights, {sum(w.numel() for w in weights) / 1e6:.1f}M parameters")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fns = kernel_fns(weights)
        xs = {(w.shape[1], m): torch.randn(m, w.shape[1]) for w in weights for m in ROWS}
        wall = {b: {m: [] for m in ROWS} for b in fns}
        cpu = {b: {m: [] for m in ROWS} for b in fns}
        with torch.inference_mode():
            for rep in range(args.repeats + 1):
                for m in ROWS:
                    for b, fs in fns.items():
                        c0, t0 = time.process_time(), time.perf_counter()
                        for f, w in zip(fs, weights):
                            f(xs[(w.shape[1], m)])
                        if rep:  # the first pass warms up
                            wall[b][m].append(time.perf_counter() - t0)
                            cpu[b][m].append(time.process_time() - c0)
            first = {}
            for j, w in enumerate(weights):
                first.setdefault(tuple(w.shape), j)
            ri = {b: all(row_independent(fs[j], weights[j].shape[1]) for j in first.values()) for b, fs in fns.items()}
    out = {}
    for b in fns:
        out[b] = {"wall_ms": {m: 1000 * statistics.median(wall[b][m]) for m in ROWS},
                  "cpu_ms": {m: 1000 * statistics.median(cpu[b][m]) for m in ROWS}, "row_independent": ri[b]}
    return out


def print_kernels(res: dict) -> None:
    for clock in ("cpu_ms", "wall_ms"):
        print(f"\n### all linears of one target forward (30 layers x 7 + LM head), {clock[:-3]} ms; "
              "(× M=1)\n")
        head = ["backend"] + [f"M={m}" for m in ROWS] + ["rows independent of M"]
        body = []
        for b, r in res.items():
            t = r[clock]
            body.append([b] + [f"{t[m]:.1f} ({t[m] / t[1]:.2f}×)" for m in ROWS] + ["yes" if r["row_independent"] else "no"])
        print(markdown_table(head, body, "l" + "r" * len(ROWS) + "l"))


# ---- part 2: quality -------------------------------------------------------------------------------
def teacher_forced(model, seqs: list[list[int]]):
    """(logits per passage [T, V] float32) from one prefill per passage."""
    import torch

    from adaspec.models.attention import build_layout
    from adaspec.runner.kv_cache import KVCache

    cfg = model.config
    out = []
    with torch.inference_mode():
        for ids in seqs:
            kv = KVCache(cfg.num_layers, 1, cfg.num_kv_heads, len(ids), cfg.head_dim, torch.float32)
            layout = build_layout([0], [0], [len(ids)], native=model.layer_kernels == "native")
            hidden, _ = model(torch.tensor(ids), layout, kv)
            out.append(model.logits(hidden))
    return out


def perplexity(logits, ids) -> float:
    import torch

    lp = torch.log_softmax(logits[:-1], dim=-1)
    nll = -lp.gather(1, torch.tensor(ids[1:])[:, None]).mean()
    return math.exp(float(nll))


def run_quality(args, tokenizer) -> dict:
    from adaspec.models.loader import load_model, resolve_model
    from adaspec.training.corpus import heldout_prompts

    model_dir = resolve_model(None)
    passages = {}
    for source in ("prose", "code"):
        items = heldout_prompts(source, 33 + args.ppl_passages if source == "code" else args.ppl_passages,
                                chars=6 * args.ppl_tokens)
        items = [it for it in items if not it.id.startswith("HumanEval")][: args.ppl_passages]
        passages[source] = [tokenizer.encode(it.text)[: args.ppl_tokens] for it in items]
    prompts = common.interleave([common.load_prompts(tokenizer, s, args.num_prompts) for s in ("code", "chat", "prose")])
    ref = QUALITY_REFERENCE
    backends = [ref] + [e for e in args.quality_engines if e != ref]
    logits, ppl, gen = {}, {}, {}
    for b in backends:
        linear, _, kernels = b.partition(":")
        _, model = load_model(model_dir, None, "cpu", linear_backend=linear, layer_kernels=kernels)
        logits[b] = {s: teacher_forced(model, seqs) for s, seqs in passages.items()}
        ppl[b] = {s: statistics.mean(perplexity(l, ids) for l, ids in zip(logits[b][s], passages[s])) for s in passages}
        del model
        llm = common.build_llm("float32", linear_backend=linear, layer_kernels=kernels, max_seqs=1)
        t0 = time.perf_counter()
        gen[b] = common.serve(llm, prompts, 1, args.max_tokens, ignore_eos=True).outputs
        log(f"[bench] quality {b}: perplexity {ppl[b]}, greedy in {time.perf_counter() - t0:.0f} s")
        del llm
        common.drop_shared_weights()
        if b != ref:
            for s in passages:
                logits[b][s] = [(l - r).abs() for l, r in zip(logits[b][s], logits[ref][s])]
    out = {}
    for b in backends:
        row = {"perplexity": ppl[b]}
        if b != ref:
            diffs = [d for s in passages for d in logits[b][s]]
            row["max_abs_logit_diff"] = max(float(d.max()) for d in diffs)
            row["mean_abs_logit_diff"] = statistics.mean(float(d.mean()) for d in diffs)
            firsts = []
            for x, y in zip(gen[b], gen[ref]):
                firsts.append(next((i for i, (s, t) in enumerate(zip(x, y)) if s != t), None))
            row["greedy_identical"] = sum(f is None for f in firsts)
            row["first_divergence"] = firsts
            row["prompts"] = [f"{p.source}:{p.id}" for p in prompts]
        out[b] = row
    return out


def print_quality(res: dict, args) -> None:
    n_prompts = max(len(r.get("prompts", [])) for r in res.values())
    print(f"\n### quality against {QUALITY_REFERENCE} (teacher-forced: {args.ppl_passages} held-out prose + code "
          f"passages × {args.ppl_tokens} tokens; greedy: {n_prompts} held-out prompts × {args.max_tokens} tokens, "
          "batch 1)\n")
    head = ["linear:kernels", "max abs Δlogit", "mean abs Δlogit", "ppl prose", "ppl code",
            f"greedy = {QUALITY_REFERENCE}", "first divergence"]
    body = []
    for b, r in res.items():
        n = len(r.get("first_divergence", []))
        body.append([b, fmt(r.get("max_abs_logit_diff"), 3), fmt(r.get("mean_abs_logit_diff"), 4),
                     fmt(r["perplexity"]["prose"], 2), fmt(r["perplexity"]["code"], 2),
                     f"{r['greedy_identical']}/{n}" if n else "(reference)",
                     " ".join("–" if f is None else str(f) for f in r.get("first_divergence", []))])
    print(markdown_table(head, body, "lrrrrrl"))


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(1)
    common.share_target_weights()
    info = common.run_info(args)
    print(f"# linear backends: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    result = {"info": info}
    if "kernels" in args.parts:
        import torch

        from adaspec.models.loader import load_model, resolve_model

        _, target = load_model(resolve_model(None), torch.float32, "cpu", linear_backend="fp32")
        result["kernels"] = run_kernels(args, target)
        del target
        print_kernels(result["kernels"])
    if "quality" in args.parts:
        from adaspec.models.loader import resolve_model
        from adaspec.models.tokenizer import Tokenizer

        result["quality"] = run_quality(args, Tokenizer(resolve_model(None)))
        print_quality(result["quality"], args)
    if args.json_out:
        common.write_json(args.json_out, result)
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
