"""Plain-decode throughput: adaspec on each linear backend vs Hugging Face transformers `generate` (issues 2, 14).

In one process, the engines serve the same model (the bundled SmolLM2-135M-Instruct unless
`--model` says otherwise; HF loads the very directory adaspec converted), in the same dtype and
thread count, greedy, with the same prompts and exactly `--max_tokens` new tokens per request (end
of sequence ignored by all). adaspec runs once per `--linear_backends` entry (default fp32, today's
kernels, and fp16w; `auto` is accepted and reported with what it chose). Prompts: `--prompts=builtin`
(bench/prompts.py, 8 chat-template prompts of mixed lengths) or held-out prompts of `code`, `chat`,
`prose` or `mixed` (adaspec.training.corpus.heldout_prompts, as bench/speculative.py renders them).

For every batch size B the prompts are served in groups of B (B=1: the 8 prompts one after
another; B=8: one call with all 8, HF left-padded with an attention mask; larger B repeats prompts).
One measurement = all groups of one engine; output tokens/s = generated tokens / wall time, with
prefill included for both engines. Measurements are repeated `--repeats` times, alternating which
engine goes first, and the medians are reported.

Decode-only figure (the same method for both engines): each measurement is repeated with one new
token (prefill + first token); decode tok/s = B_total * (max_tokens - 1) / (median t_full -
median t_first).

Two clocks: wall time, and the process's CPU time (time.process_time). On a shared machine other
jobs on the same core stretch wall time at random; with one thread the CPU time of the process is
what the run would take alone (memory-bandwidth interference aside), so it is reported too.

Greedy exactness: the script compares adaspec's tokens with HF's for every prompt (the B=1 row is
the one that matters; in float32 they should agree, in bfloat16 rounding may flip a token, so a
mismatch is reported, never a failure).

    taskset -c 0 python bench/plain_decode.py --dtype=float32 --threads=1 --json_out=out.json
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `adaspec` importable from the repo
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, parse_list, write_json  # noqa: E402
from bench.prompts import CHAT_PROMPTS  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="adaspec vs HF transformers generate: greedy plain-decode output tokens/s at several batch sizes",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", default=None,
                   help="HF model directory or .gguf file; default: the bundled SmolLM2-135M-Instruct")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="weights/activations dtype, the same for both engines")
    p.add_argument("--linear_backends", default="fp32,fp16w",
                   help="comma-separated adaspec engines to run side by side, each LINEAR[:KERNELS]: its --linear_backend "
                        "(auto, fp32, fp16w, bf16, int8) and optionally its --layer_kernels (auto, native, torch; "
                        "default auto), e.g. fp32:torch,auto (the engine before issue 14 against today's default)")
    p.add_argument("--prompts", default="builtin", choices=("builtin", "code", "chat", "prose", "mixed"),
                   help="builtin: bench/prompts.py chat prompts; else held-out prompts of that source")
    p.add_argument("--num_prompts", type=int, default=8, help="held-out prompts (ignored with --prompts=builtin)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads for both engines (>1 sets OMP_WAIT_POLICY=PASSIVE, see NOTES.md)")
    p.add_argument("--max_tokens", type=int, default=64,
                   help="new tokens per request (exactly this many: end of sequence is ignored)")
    p.add_argument("--repeats", type=int, default=3,
                   help="measurements per engine and batch size, alternating engines; medians are reported")
    p.add_argument("--batch_sizes", default="1,8",
                   help="comma-separated batch sizes; prompts are served in groups of this many")
    p.add_argument("--decode_only", default="true", choices=("true", "false"),
                   help="also time prefill + 1 token to derive a decode-only tok/s figure")
    p.add_argument("--json_out", default=None, help="write all measurements and medians to this JSON file")
    args = p.parse_args(argv)
    try:
        args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    except ValueError:
        p.error(f"--batch_sizes={args.batch_sizes}: expected comma-separated positive integers, e.g. 1,8")
    if not args.batch_sizes or min(args.batch_sizes) < 1:
        p.error(f"--batch_sizes={args.batch_sizes}: expected comma-separated positive integers, e.g. 1,8")
    for name in ("threads", "max_tokens", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name}={getattr(args, name)}: must be >= 1")
    if args.max_tokens < 2 and args.decode_only == "true":
        p.error("--max_tokens must be >= 2 for the decode-only figure (or pass --decode_only=false)")
    args.decode_only = args.decode_only == "true"
    args.linear_backends = parse_list(args.linear_backends, str, name="linear_backends")
    for entry in args.linear_backends:
        linear, _, kernels = entry.partition(":")
        if linear not in ("auto", "fp32", "fp16w", "bf16", "int8") or kernels not in ("", "auto", "native", "torch"):
            p.error(f"--linear_backends: {entry!r} is not LINEAR[:KERNELS] with LINEAR in auto, fp32, fp16w, bf16, int8 "
                    "and KERNELS in auto, native, torch")
    return args


def groups_for(prompts: list[list[int]], batch_size: int) -> list[list[list[int]]]:
    """Groups of `batch_size` prompts covering every prompt at least once (cycling when B > #prompts)."""
    n = max(len(prompts), batch_size)
    n = -(-n // batch_size) * batch_size
    cycled = [prompts[i % len(prompts)] for i in range(n)]
    return [cycled[i:i + batch_size] for i in range(0, n, batch_size)]


class AdaspecEngine:
    def __init__(self, model, dtype: str, threads: int, max_batch: int, engine: str = "fp32"):
        from adaspec.engine.llm_engine import LLM
        from adaspec.sampling_params import SamplingParams

        linear_backend, _, kernels = engine.partition(":")
        self.llm = LLM(model=model, dtype=dtype, threads=threads, max_seqs_per_batch=max_batch,
                       linear_backend=linear_backend, layer_kernels=kernels or "auto")
        self.backend = self.llm.engine.linear_backend
        self.kernels = self.llm.engine.layer_kernels
        self.name = (f"adaspec-{linear_backend}" + (f"({self.backend})" if linear_backend == "auto" else "")
                     + f":{self.kernels}")
        self._params = SamplingParams
        self.model_dir = self.llm.engine.model_dir

    def chat_ids(self, text: str) -> list[int]:
        return self.llm.tokenizer.chat_prompt_ids(text)

    def generate(self, group: list[list[int]], max_tokens: int) -> list[list[int]]:
        params = self._params(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        return [list(o.token_ids) for o in self.llm.generate(group, params)]


class HFEngine:
    name = "hf"

    def __init__(self, model_dir, dtype: str, pad_token_id: int):
        import torch
        from transformers import GenerationConfig, LlamaForCausalLM

        self.torch = torch
        self.model = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=getattr(torch, dtype)).eval()
        self.pad = pad_token_id
        # No eos, like adaspec's ignore_eos: HF runs exactly n steps and neither stops at nor
        # suppresses the eos token (min_new_tokens would suppress it and change the greedy tokens).
        # generate() fills unset (None) fields from model.generation_config, so clear it there too.
        self.model.generation_config.eos_token_id = None
        self._config = lambda n: GenerationConfig(
            do_sample=False, max_new_tokens=n,
            eos_token_id=None, pad_token_id=pad_token_id, bos_token_id=None,
            num_beams=1, use_cache=True, temperature=None, top_p=None, top_k=None,
        )

    def generate(self, group: list[list[int]], max_tokens: int) -> list[list[int]]:
        torch = self.torch
        width = max(len(p) for p in group)
        ids = torch.full((len(group), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for i, p in enumerate(group):  # left padding
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=self._config(max_tokens))
        return out[:, width:].tolist()


def timed(engine, groups, max_tokens: int) -> tuple[float, float, list[list[int]]]:
    """(wall seconds, process CPU seconds, outputs) of serving all groups with one engine."""
    gc.collect()
    outputs = []
    c0, t0 = time.process_time(), time.perf_counter()
    for g in groups:
        outputs += engine.generate(g, max_tokens)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    bad = [len(o) for o in outputs if len(o) != max_tokens]
    if bad:
        raise RuntimeError(f"{engine.name} produced {bad[:4]} tokens instead of {max_tokens}")
    return elapsed, cpu, outputs


def compare(a: list[list[int]], b: list[list[int]]) -> dict:
    """Sequences equal, and mean fraction of tokens before the first divergence."""
    prefix = []
    for x, y in zip(a, b):
        k = next((i for i, (s, t) in enumerate(zip(x, y)) if s != t), min(len(x), len(y)))
        prefix.append(k / max(len(x), 1))
    return {
        "sequences_equal": sum(x == y for x, y in zip(a, b)),
        "sequences": len(a),
        "mean_prefix_fraction": sum(prefix) / len(prefix),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads > 1:  # before torch starts OpenMP (NOTES.md: spinning threads stall for ~1 s)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    max_batch = max(args.batch_sizes)
    adas = [AdaspecEngine(args.model, args.dtype, args.threads, max_batch, b) for b in args.linear_backends]
    ada = adas[0]
    tok = ada.llm.tokenizer
    if args.prompts == "builtin":
        prompts = [ada.chat_ids(t) for t in CHAT_PROMPTS]
    else:
        from bench.common import prompt_sets

        prompts = [list(p.ids) for p in prompt_sets(tok, [args.prompts], args.num_prompts, 192, "auto")[args.prompts]]
    pad = tok.hf_tokenizer.pad_token_id
    pad = pad if pad is not None else min(tok.eos_token_ids)
    hf = HFEngine(ada.model_dir, args.dtype, pad)
    torch.set_num_threads(args.threads)  # all engines, whatever either library did while loading
    engines = adas + [hf]
    names = [e.name for e in adas]

    lens = [len(p) for p in prompts]
    info = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "machine": machine(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
        "model_dir": str(ada.model_dir), "dtype": args.dtype, "threads": args.threads,
        "max_tokens": args.max_tokens, "repeats": args.repeats, "batch_sizes": args.batch_sizes,
        "prompt_tokens": lens, "prompts": args.prompts,
        "linear_backends": {e.name: e.backend for e in adas},
        "layer_kernels": {e.name: e.kernels for e in adas},
    }
    print(f"# plain decode: {info['machine']}; torch {info['torch']}, transformers {info['transformers']}", flush=True)
    print(f"# dtype={args.dtype} threads={args.threads} max_tokens={args.max_tokens} repeats={args.repeats} "
          f"prompts={len(prompts)} (chat-template prompt tokens {min(lens)}..{max(lens)}, mean {sum(lens) / len(lens):.0f})",
          flush=True)

    # Warm-up: one short run of each engine at each batch size (allocations, kernels, caches).
    for e in engines:
        for b in args.batch_sizes:
            e.generate(groups_for(prompts, b)[0], 4)

    raw: dict = {b: {e.name: {k: [] for k in ("wall", "cpu", "wall_first", "cpu_first")} for e in engines}
                 for b in args.batch_sizes}
    tokens: dict = {b: {} for b in args.batch_sizes}
    for rep in range(args.repeats):
        order = engines if rep % 2 == 0 else engines[::-1]
        for b in args.batch_sizes:
            groups = groups_for(prompts, b)
            for e in order:
                r = raw[b][e.name]
                t, c, outs = timed(e, groups, args.max_tokens)
                r["wall"].append(t)
                r["cpu"].append(c)
                prev = tokens[b].setdefault(e.name, outs)
                if prev != outs:
                    print(f"  note: {e.name} B={b} greedy output changed between repeats", flush=True)
                msg = f"  rep {rep + 1} B={b} {e.name:7s} {t:7.2f} s wall, {c:7.2f} s CPU"
                if args.decode_only:
                    t1, c1, _ = timed(e, groups, 1)
                    r["wall_first"].append(t1)
                    r["cpu_first"].append(c1)
                    msg += f"; prefill + 1 token {t1:6.2f} s wall, {c1:6.2f} s CPU"
                print(msg, flush=True)

    rows = []
    for b in args.batch_sizes:
        n_req = len(groups_for(prompts, b)) * b
        row = {"batch_size": b, "requests": n_req, "output_tokens": n_req * args.max_tokens}
        for clock in ("wall", "cpu"):
            for e in engines:
                r = raw[b][e.name]
                full = statistics.median(r[clock])
                row[f"{e.name}_{clock}_s"] = full
                row[f"{e.name}_{clock}_tok_s"] = n_req * args.max_tokens / full
                if args.decode_only:
                    first = statistics.median(r[f"{clock}_first"])
                    row[f"{e.name}_{clock}_first_s"] = first
                    row[f"{e.name}_{clock}_decode_tok_s"] = (
                        n_req * (args.max_tokens - 1) / (full - first) if full > first else None)
            for n in names:
                row[f"{n}_{clock}_vs_hf"] = row[f"{n}_{clock}_tok_s"] / row[f"hf_{clock}_tok_s"]
                row[f"{n}_{clock}_vs_first"] = row[f"{n}_{clock}_tok_s"] / row[f"{names[0]}_{clock}_tok_s"]
                if args.decode_only and row[f"{n}_{clock}_decode_tok_s"] and row[f"hf_{clock}_decode_tok_s"]:
                    row[f"{n}_{clock}_decode_vs_hf"] = row[f"{n}_{clock}_decode_tok_s"] / row[f"hf_{clock}_decode_tok_s"]
        for n in names:
            row[f"{n}_greedy_match_vs_hf"] = compare(tokens[b][n], tokens[b]["hf"])
            row[f"{n}_greedy_match_vs_first"] = compare(tokens[b][n], tokens[b][names[0]])
            if b != 1 and 1 in tokens:  # the engine's promise: batched greedy output = each prompt alone
                alone = {tuple(p): o for p, o in zip(prompts, tokens[1][n])}
                expected = [alone[tuple(p)] for g in groups_for(prompts, b) for p in g]
                row[f"{n}_batch_equals_alone"] = compare(tokens[b][n], expected)
        rows.append(row)

    fmt = lambda v: f"{v:.1f}" if v else "n/a"  # noqa: E731
    fmx = lambda v: f"{v:.2f}×" if v else "n/a"  # noqa: E731
    for clock, title in (("wall", "wall clock"), ("cpu", "process CPU time (robust to other jobs on the core)")):
        print(f"\nmedian output tokens/s, {title}; prefill included; decode = {args.max_tokens - 1} tokens after "
              f"the first, prefill excluded; × {names[0]} and × HF")
        head = "| batch | engine | tok/s | × " + names[0] + " | × HF |"
        sep = "|---:|---|---:|---:|---:|"
        if args.decode_only:
            head += " decode tok/s | decode × HF |"
            sep += "---:|---:|"
        print(head)
        print(sep)
        for r in rows:
            for n in names + ["hf"]:
                line = (f"| {r['batch_size']} | {n} | {fmt(r[f'{n}_{clock}_tok_s'])} | "
                        f"{fmx(r.get(f'{n}_{clock}_vs_first'))} | {fmx(r.get(f'{n}_{clock}_vs_hf'))} |")
                if args.decode_only:
                    line += f" {fmt(r[f'{n}_{clock}_decode_tok_s'])} | {fmx(r.get(f'{n}_{clock}_decode_vs_hf'))} |"
                print(line)
    print()
    for r in rows:
        for n in names:
            m = r[f"{n}_greedy_match_vs_hf"]
            print(f"greedy tokens, {n} vs HF, B={r['batch_size']}: {m['sequences_equal']}/{m['sequences']} sequences "
                  f"identical, mean {100 * m['mean_prefix_fraction']:.1f}% of tokens before the first divergence")
            if n != names[0]:
                m = r[f"{n}_greedy_match_vs_first"]
                print(f"greedy tokens, {n} vs {names[0]}, B={r['batch_size']}: {m['sequences_equal']}/{m['sequences']} "
                      f"identical, mean {100 * m['mean_prefix_fraction']:.1f}% of tokens before the first divergence")
            if f"{n}_batch_equals_alone" in r:
                m = r[f"{n}_batch_equals_alone"]
                print(f"greedy tokens, {n} B={r['batch_size']} vs B=1: {m['sequences_equal']}/{m['sequences']} "
                      "sequences identical")

    if args.json_out:
        result = {"info": info, "results": rows,
                  "raw_seconds": {str(b): v for b, v in raw.items()}}
        write_json(args.json_out, result)
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
