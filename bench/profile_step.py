"""Where the time of one round goes: torch.profiler of a B=1 plain step and a B=1 MTP round (issue 14).

One engine per configuration (--linear_backend, default auto), --batch_size held-out code prompts
(default 1), prefilled
and decoded for --warmup rounds, then --steps rounds profiled. Bench-side annotations
(`record_function` around the drafter's `draft`, the target's `logits` and the round runner's
`sample` / `count_accepted`) mark the draft, the LM head and sampling; the remaining ops of the
target forward are grouped by name: linear kernels (with adaspec's fp16w kernel of 4-32 rows, a
`native gemm` range), attention (scaled_dot_product_attention and
everything under it, plus the KV-cache writes), and other target ops (norms, rotary, activations,
residual adds, embedding). "Python and dispatch" = the round's wall time minus the self time of
every op: interpreter, argument handling, profiler bookkeeping. Unprofiled rounds are timed too
(wall and process CPU), so the profiler's own overhead is visible.

    taskset -c 0 python bench/profile_step.py --json_out=bench/results/profile_step.json
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import log, markdown_table  # noqa: E402

LINEAR_OPS = ("fbgemm_linear_fp16_weight", "linear_dynamic_fp16", "aten::linear", "aten::addmm", "aten::mm",
              "aten::_int_mm", "aten::matmul", "aten::bmm")
ATTENTION_OPS = ("scaled_dot_product_attention", "flash_attention", "aten::index_put")
GROUPS = ("linears", "attention", "LM head", "sampling", "draft", "other target ops", "Python and dispatch")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="per-op profile of a B=1 plain step and a B=1 MTP round",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--linear_backend", default="auto", help="--linear_backend of both engines")
    p.add_argument("--layer_kernels", default="auto", help="--layer_kernels of both engines (auto, native, torch)")
    p.add_argument("--mtp_k", type=int, default=3, help="MTP draft steps of the speculative round")
    p.add_argument("--batch_size", type=int, default=1, help="requests decoding together")
    p.add_argument("--warmup", type=int, default=8, help="rounds before profiling")
    p.add_argument("--steps", type=int, default=24, help="rounds profiled (and timed unprofiled)")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    return p.parse_args(argv)


@contextlib.contextmanager
def annotations(engine):
    """record_function ranges around the draft, the LM head and sampling (restored afterwards)."""
    import torch

    from adaspec.models import native_gemm, native_kernels
    from adaspec.runner import round_runner

    patched = []

    def wrap(owner, name, label):
        original = getattr(owner, name)

        def inner(*a, **k):
            with torch.profiler.record_function(label):
                return original(*a, **k)

        setattr(owner, name, inner)
        patched.append((owner, name, original))

    if engine.drafter is not None:
        wrap(engine.drafter, "draft", "draft")
    wrap(engine.model, "logits", "LM head")
    wrap(round_runner, "sample", "sampling")
    wrap(round_runner, "count_accepted", "sampling")
    wrap(native_kernels, "attend", "native attention")  # --layer_kernels=native: no torch op inside
    wrap(native_gemm.NativeF16w, "__call__", "native gemm")  # fp16w products of 4-32 rows: no torch op inside
    try:
        yield
    finally:
        for owner, name, original in reversed(patched):
            if owner is engine.drafter or owner is engine.model:
                delattr(owner, name)  # back to the class attribute
            else:
                setattr(owner, name, original)


def group_of(event) -> str:
    e, names = event, []
    while e is not None:
        names.append(e.name)
        e = e.cpu_parent
    for label in ("draft", "LM head", "sampling"):
        if label in names:
            return label
    if "native attention" in names or any(any(a in n for a in ATTENTION_OPS) for n in names):
        return "attention"
    if "native gemm" in names or any(any(n == op or n.endswith(op.split("::")[-1]) for op in LINEAR_OPS)
                                     for n in names):
        return "linears"
    return "other target ops"


def profile_config(llm, prompts, args) -> dict:
    import torch

    from adaspec.sampling_params import SamplingParams

    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=args.warmup + 3 * args.steps * (args.mtp_k + 1) + 8,
                            ignore_eos=True)
    for prompt in prompts:
        engine.add_request(list(prompt.ids), params)
    while not all(r.prefilled for r in engine.requests.values()):
        engine.step()
    for _ in range(args.warmup):
        engine.step()
    c0, t0 = time.process_time(), time.perf_counter()
    n0 = sum(len(r.output_token_ids) for r in engine.requests.values())
    for _ in range(args.steps):
        engine.step()
    wall, cpu = (time.perf_counter() - t0) / args.steps, (time.process_time() - c0) / args.steps
    tokens = (sum(len(r.output_token_ids) for r in engine.requests.values()) - n0) / args.steps
    with annotations(engine), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        tp = time.perf_counter()
        for _ in range(args.steps):
            engine.step()
        prof_wall = (time.perf_counter() - tp) / args.steps
    ms = {g: 0.0 for g in GROUPS}
    top: dict[str, float] = {}
    for ev in prof.events():
        if ev.name in ("draft", "LM head", "sampling"):
            continue  # annotation ranges: their ops are counted below
        self_ms = ev.self_cpu_time_total / 1000 / args.steps
        ms[group_of(ev)] += self_ms
        top[ev.name] = top.get(ev.name, 0.0) + self_ms
    ms["Python and dispatch"] = max(0.0, 1000 * prof_wall - sum(ms.values()))
    for rid in list(engine.requests):
        engine.abort(rid)
    return {"round_ms_wall": 1000 * wall, "round_ms_cpu": 1000 * cpu, "tokens_per_round": tokens,
            "profiled_round_ms": 1000 * prof_wall, "groups_ms": ms,
            "top_ops_ms": dict(sorted(top.items(), key=lambda kv: -kv[1])[:12])}


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(1)
    common.share_target_weights()
    info = common.run_info(args)
    print(f"# per-op profile: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    configs = {"plain": ("none", None), f"mtp{args.mtp_k}": ("MTP", args.mtp_k)}
    result = {"info": info, "configs": {}}
    for name, (algo, k) in configs.items():
        llm = common.build_llm("float32", algo, k, max_seqs=args.batch_size, max_model_len=1024,
                               linear_backend=args.linear_backend, layer_kernels=args.layer_kernels)
        prompts = common.load_prompts(llm.tokenizer, "code", args.batch_size)
        r = profile_config(llm, prompts, args)
        r["linear_backend"] = llm.engine.linear_backend
        r["layer_kernels"] = llm.engine.layer_kernels
        result["configs"][name] = r
        log(f"[bench] {name}: {r['round_ms_cpu']:.1f} ms CPU per round, {r['tokens_per_round']:.2f} tokens per round")
        del llm
    first = next(iter(result["configs"].values()))
    print(f"\n### one B={args.batch_size} round on {first['linear_backend']} linears and {first['layer_kernels']} "
          "layer kernels, ms per round (profiled; share of the profiled round)\n")
    head = ["group"] + list(result["configs"])
    body = []
    for g in GROUPS:
        body.append([g] + [f"{c['groups_ms'][g]:.1f} ({100 * c['groups_ms'][g] / c['profiled_round_ms']:.0f}%)"
                           for c in result["configs"].values()])
    body.append(["profiled round"] + [f"{c['profiled_round_ms']:.1f}" for c in result["configs"].values()])
    body.append(["unprofiled round, wall / CPU"] + [f"{c['round_ms_wall']:.1f} / {c['round_ms_cpu']:.1f}"
                                                    for c in result["configs"].values()])
    body.append(["tokens per round"] + [f"{c['tokens_per_round']:.2f}" for c in result["configs"].values()])
    print(markdown_table(head, body, "l" + "r" * len(result["configs"])))
    for name, c in result["configs"].items():
        print(f"\n{name}: top ops by self time (ms per round): "
              + ", ".join(f"{k} {v:.2f}" for k, v in list(c["top_ops_ms"].items())[:8]))
    if args.json_out:
        common.write_json(args.json_out, result)
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
