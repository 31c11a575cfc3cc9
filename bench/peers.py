"""adaspec against llama.cpp on the same prompts and thread (issue 14): the speed a CPU user compares with.

llama.cpp runs through `llama-cpp-python` (not a dependency of adaspec or its tests; build it with
`CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python==0.3.36`) on the bundled GGUF itself
(SmolLM2-135M-Instruct Q4_1: it computes on the 4-bit weights), greedy, in two settings: plain
decoding and its prompt-lookup speculation (`LlamaPromptLookupDecoding(num_pred_tokens=5)`).
adaspec runs the same held-out prompts (token ids, so both read the same tokens) in the settings of
`--adaspec_configs` (plain and MTP k = 1..3 with the shipped draft, on `--linear_backend`). Every
request generates exactly `--max_tokens` tokens (end of sequence ignored), one request at a time
(batch 1), one thread. One measurement = all prompts, prompt evaluation included; measurements
alternate engines, medians of `--repeats`; process CPU time and wall time.

Without llama-cpp-python the script says so and exits 0 (adaspec-only numbers are in
bench/speculative.py). llama.cpp's logits differ from adaspec's (4-bit compute), so tokens are
compared for information only; speed is the point.

    taskset -c 0 python bench/peers.py --json_out=bench/results/peers.json
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import fmt, log, markdown_table  # noqa: E402

INSTALL = 'CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python==0.3.36'


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="adaspec vs llama.cpp (llama-cpp-python): plain and speculative decoding",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sources", default="code", help="comma-separated held-out prompt sources: code, chat, prose")
    p.add_argument("--num_prompts", type=int, default=6, help="held-out prompts per source")
    p.add_argument("--max_tokens", type=int, default=128, help="tokens generated per prompt (end of sequence ignored)")
    p.add_argument("--repeats", type=int, default=3, help="measurements per engine, alternating; medians reported")
    p.add_argument("--linear_backend", default="auto", help="adaspec --linear_backend")
    p.add_argument("--adaspec_configs", default="plain,mtp1,mtp2,mtp3",
                   help="adaspec settings: plain, mtpK (shipped MTP draft, K draft steps)")
    p.add_argument("--lookup_tokens", type=int, default=5, help="llama.cpp prompt-lookup tokens per round")
    p.add_argument("--threads", type=int, default=1, help="threads for both")
    p.add_argument("--llama_no_extra_bufts", action="store_true",
                   help="load the GGUF without llama.cpp's extra weight buffer types (its AMX / repacked weights): "
                        "llama.cpp built with GGML_NATIVE=ON crashed in its AMX path (general protection fault in "
                        "libggml-cpu) on this project's Intel Xeon VM; with this flag it runs its AVX-512 kernels")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    args.sources = common.parse_list(args.sources, str, ("code", "chat", "prose"), name="sources")
    args.adaspec_configs = common.parse_list(args.adaspec_configs, str, name="adaspec_configs")
    for c in args.adaspec_configs:
        if not (c == "plain" or (c.startswith("mtp") and c[3:].isdigit() and int(c[3:]) >= 1)):
            p.error(f"--adaspec_configs: {c!r} is not plain or mtpK")
    return args


@contextmanager
def _model_params(**fields):
    """llama-cpp-python builds its model parameters inside `Llama.__init__` from
    `llama_model_default_params()` and has no keyword for some of them (`use_extra_bufts`): the
    defaults are overridden while one model loads, then restored."""
    import llama_cpp.llama as llama_module

    default = llama_module.llama_cpp.llama_model_default_params

    def params():
        p = default()
        for k, v in fields.items():
            setattr(p, k, v)
        return p

    llama_module.llama_cpp.llama_model_default_params = params
    try:
        yield
    finally:
        llama_module.llama_cpp.llama_model_default_params = default


class LlamaCpp:
    def __init__(self, gguf: str, threads: int, lookup: int | None, extra_bufts: bool = True):
        from llama_cpp import Llama

        draft = None
        if lookup:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(num_pred_tokens=lookup)
        self.name = f"llama.cpp prompt lookup ({lookup})" if lookup else "llama.cpp plain"
        with _model_params(**({} if extra_bufts else {"use_extra_bufts": False})):
            self.llm = Llama(model_path=gguf, n_ctx=1024, n_threads=threads, n_threads_batch=threads, n_batch=512,
                             draft_model=draft, verbose=False)

    def generate(self, ids: list[int], n: int) -> list[int]:
        self.llm.reset()  # no prefix reuse between requests: every prompt is evaluated
        out = []
        for tok in self.llm.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
            out.append(int(tok))
            if len(out) == n:
                break
        return out


class Adaspec:
    def __init__(self, config: str, backend: str, threads: int):
        from adaspec.sampling_params import SamplingParams

        algo, k = ("none", None) if config == "plain" else ("MTP", int(config[3:]))
        self.llm = common.build_llm("float32", algo, k, max_seqs=1, max_model_len=1024, threads=threads,
                                    linear_backend=backend)
        self.name = f"adaspec {self.llm.engine.linear_backend} {config}"
        self._params = SamplingParams

    def generate(self, ids: list[int], n: int) -> list[int]:
        return list(self.llm.generate([ids], self._params(temperature=0, max_tokens=n, ignore_eos=True))[0].token_ids)


def measure(engine, prompts, n: int) -> tuple[float, float, list[list[int]]]:
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    outs = [engine.generate(list(p.ids), n) for p in prompts]
    return time.perf_counter() - t0, time.process_time() - c0, outs


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import llama_cpp
    except ImportError:
        print(f"llama-cpp-python is not installed: skipping the llama.cpp comparison (install it with {INSTALL})")
        return 0
    common.setup_threads(args.threads)
    common.share_target_weights()
    info = common.run_info(args)
    info["llama_cpp_python"] = llama_cpp.__version__
    from adaspec.models.loader import bundled_gguf_path

    gguf = str(bundled_gguf_path())
    engines = [Adaspec(c, args.linear_backend, args.threads) for c in args.adaspec_configs]
    extra = not args.llama_no_extra_bufts
    engines += [LlamaCpp(gguf, args.threads, None, extra), LlamaCpp(gguf, args.threads, args.lookup_tokens, extra)]
    tok = engines[0].llm.tokenizer
    prompts = [p for s in args.sources for p in common.load_prompts(tok, s, args.num_prompts)]
    print(f"# peers: {info['machine']}; torch {info['torch']}; llama-cpp-python {info['llama_cpp_python']}; "
          f"{info['date']}", flush=True)
    print(f"# {len(prompts)} held-out prompts ({','.join(args.sources)}), {args.max_tokens} tokens each, batch 1, "
          f"{args.threads} thread(s); GGUF {gguf}", flush=True)
    for e in engines:  # warm-up
        e.generate(list(prompts[0].ids), 4)
    raw = {e.name: {"wall": [], "cpu": []} for e in engines}
    outs = {}
    for rep in range(args.repeats):
        for e in engines if rep % 2 == 0 else engines[::-1]:
            wall, cpu, o = measure(e, prompts, args.max_tokens)
            raw[e.name]["wall"].append(wall)
            raw[e.name]["cpu"].append(cpu)
            outs.setdefault(e.name, o)
            log(f"  rep {rep + 1} {e.name:32s} {wall:7.2f} s wall {cpu:7.2f} s CPU")
    n_tok = len(prompts) * args.max_tokens
    rows = []
    ref = engines[0].name
    for e in engines:
        r = raw[e.name]
        cmp = common.compare_tokens(outs[e.name], outs[ref])
        rows.append({"engine": e.name, "wall_tok_s": n_tok / statistics.median(r["wall"]),
                     "cpu_tok_s": n_tok / statistics.median(r["cpu"]), "equal_to_first": cmp, "raw": r})
    base = {c: next(r[c] for r in rows if r["engine"] == "llama.cpp plain") for c in ("cpu_tok_s", "wall_tok_s")}
    print(f"\n### batch 1, {len(prompts)} held-out {','.join(args.sources)} prompts × {args.max_tokens} tokens, prompt "
          f"evaluation included, {args.threads} thread\n")
    head = ["engine", "tok/s CPU", "tok/s wall", "× llama.cpp plain (CPU)", f"tokens = {ref}"]
    body = [[r["engine"], fmt(r["cpu_tok_s"]), fmt(r["wall_tok_s"]), f"{r['cpu_tok_s'] / base['cpu_tok_s']:.2f}×",
             f"{r['equal_to_first']['equal']}/{r['equal_to_first']['sequences']}"] for r in rows]
    print(markdown_table(head, body, "lrrrr"))
    if args.json_out:
        common.write_json(args.json_out, {"info": info, "results": rows})
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
