"""Shared helpers of the speculative / adaptive / calibration benchmarks (bench-side only).

What lives here:
- `setup_threads`, `machine`, `log`: the process set-up and progress output on stderr;
- `share_target_weights`: a bench-side hook that makes every engine of one process share one copy
  of the target weights per dtype and linear backend (the model is stateless: KV caches belong to each engine's
  runner), so a dozen engines fit in memory and can be measured alternately in the same process;
- `build_llm`: an `LLM` for one configuration (plain / MTP / DSpark, any engine flag);
- `load_prompts`, `interleave`: held-out prompts (`adaspec.training.corpus.heldout_prompts`,
  never seen by `adaspec train-draft`) rendered and cut exactly as the trainer renders its own
  prompts (chat items with the chat template, the rest as raw text, at most `prompt_tokens`);
- `serve`: a continuous-batching driver that keeps at most B requests running and measures wall
  clock, process CPU time and per-request TPOT;
- `RoundRecorder`: per-round statistics of one run (acceptance counters, verify rows);
- `compare_tokens`, `median`, `fmt_*`, `markdown_table`: reporting.

Two clocks. The machine is shared (other jobs run on the same core), so besides wall time the
process CPU time (`time.process_time`) is reported: with one thread it is what the run would
take alone, memory-bandwidth interference aside.
"""

from __future__ import annotations

import datetime
import functools
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adaspec.metrics.spec_stats import SpecStats  # noqa: E402 (after the path fix above)

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
SOURCES = ("code", "chat", "prose")


# ---- process set-up and output ------------------------------------------------------------------
def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def best_ms(fn, n: int = 100, passes: int = 5) -> float:
    """Milliseconds per call of `fn`: the best of `passes` passes of `n` calls (micro-benchmarks of one op)."""
    best = float("inf")
    for _ in range(passes):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e3


def setup_threads(threads: int) -> None:
    """Before torch starts OpenMP: passive waiting with >1 thread (NOTES.md: 1 s stalls otherwise)."""
    if threads > 1:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    torch.set_num_threads(threads)


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        name = next((l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name")), "")
    except (OSError, subprocess.SubprocessError):
        name = ""
    return f"{name or platform.processor() or 'unknown CPU'}, {os.cpu_count()} logical CPUs"


def run_info(args) -> dict:
    import torch

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "machine": machine(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "args": {k: v for k, v in vars(args).items()},
    }


def parse_list(text: str, kind=str, allowed: Sequence | None = None, name: str = "list") -> list:
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    try:
        out = [kind(t) for t in items]
    except ValueError:
        raise SystemExit(f"--{name}={text}: expected a comma-separated list of {kind.__name__}")
    if not out:
        raise SystemExit(f"--{name}: empty list")
    if allowed is not None:
        bad = [t for t in out if t not in allowed]
        if bad:
            raise SystemExit(f"--{name}: {bad} not in {list(allowed)}")
    return out


# ---- engines ------------------------------------------------------------------------------------
_SHARED: dict = {}
_PATCHED = False


def share_target_weights() -> None:
    """Every engine built afterwards in this process reuses one target model per (dir, dtype, device)."""
    global _PATCHED
    if _PATCHED:
        return
    from adaspec.models import loader

    original = loader.load_model

    def cached_load_model(model_dir, dtype=None, device="cpu", linear_backend="fp32", **kwargs):
        # keyed by the requested backend: "auto" measures once, later engines reuse its choice
        key = (str(Path(model_dir).resolve()), str(dtype), str(device), linear_backend)
        if key not in _SHARED:
            _SHARED[key] = original(model_dir, dtype, device, linear_backend=linear_backend, **kwargs)
        return _SHARED[key]

    loader.load_model = cached_load_model
    _PATCHED = True


def drop_shared_weights() -> None:
    _SHARED.clear()
    gc.collect()


def build_llm(dtype: str, algorithm: str = "none", width: int | None = None, draft_model: str | None = None,
              max_seqs: int = 16, max_model_len: int | None = 512, threads: int = 1, **flags):
    """An `LLM` for one configuration, built exactly as `LLM(...)` / the CLI build it (every engine
    flag passes through); `draft_model=None`: the shipped draft of the algorithm."""
    from adaspec.engine.llm_engine import LLM

    kw = dict(dtype=dtype, threads=threads, max_seqs_per_batch=max_seqs, max_model_len=max_model_len, **flags)
    if algorithm != "none":
        kw.update(speculative_algorithm=algorithm, num_speculative_tokens=width, draft_model=draft_model)
    return LLM(**kw)


def shipped_drafts_present() -> dict[str, bool]:
    from adaspec.drafts.factory import shipped_draft_dir

    return {k: (shipped_draft_dir(k) / "model.safetensors").is_file() for k in ("mtp", "dspark")}


# ---- prompts ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prompt:
    source: str
    id: str
    ids: tuple[int, ...]


def load_prompts(tokenizer, source: str, n: int, prompt_tokens: int = 192, template: str = "auto") -> list[Prompt]:
    """`n` held-out prompts of `source`, rendered as the trainer renders its prompts (distill.py):
    chat items with the chat template (template="auto"; "all"/"none" force it on/off), cut to
    the last `prompt_tokens` tokens for chat and human-eval, the first ones for passages."""
    from adaspec.training.corpus import copy_items, heldout_prompts

    # "copydev": the copy-heavy *dev* split, the only copy prompts anything may be tuned on (issue 10)
    items = copy_items("train")[:n] if source == "copydev" else heldout_prompts(source, n)
    out = []
    for it in items:
        chat = it.chat if template == "auto" else template == "all"
        if it.messages is not None:  # multi-turn copy prompts: the whole conversation
            ids = tokenizer.apply_chat_template(list(it.messages), add_generation_prompt=True)
        else:
            ids = tokenizer.chat_prompt_ids(it.text) if chat else tokenizer.encode(it.text)
        if source in ("copy", "copydev"):  # the passage is the point of the prompt: never cut it
            out.append(Prompt(source, it.id, tuple(ids)))
            continue
        keep_tail = chat or it.id.startswith("HumanEval")
        ids = ids[-prompt_tokens:] if keep_tail else ids[:prompt_tokens]
        out.append(Prompt(source, it.id, tuple(ids)))
    if len(out) < n:
        log(f"[bench] note: only {len(out)} held-out {source} prompts available (asked for {n})")
    return out


def interleave(groups: Sequence[Sequence[Prompt]]) -> list[Prompt]:
    """Round-robin over the groups: code, chat, prose, code, chat, prose, ..."""
    out = []
    for i in range(max(len(g) for g in groups)):
        out += [g[i] for g in groups if i < len(g)]
    return out


def prompt_sets(tokenizer, sources: Sequence[str], n: int, prompt_tokens: int, template: str) -> dict[str, list[Prompt]]:
    """{source: prompts}; "mixed" interleaves code, chat and prose (n prompts in all); "staggered" is
    the mixed stream again, for benches that serve it with staggered arrivals."""
    mixed = "mixed" in sources or "staggered" in sources
    per = {s: load_prompts(tokenizer, s, n, prompt_tokens, template) for s in SOURCES + ("copy", "copydev")
           if s in sources or (s in SOURCES and mixed)}
    out = {s: per[s] for s in sources if s not in ("mixed", "staggered")}
    for s in ("mixed", "staggered"):
        if s in sources:
            out[s] = interleave([per[x] for x in SOURCES])[:n]
    return out


def warmed_prompt_sets(engines: dict, args) -> dict[str, list[Prompt]]:
    """The prompt sets of `args.sources` (max(--num_prompts, largest B) prompts each), after every
    engine of `engines` (all of one target, so any gives the tokenizer) ran short generations at the
    largest batch, so the first measured run pays no warm-up."""
    tok = next(iter(engines.values())).tokenizer
    n_max = max(args.num_prompts, max(args.batch_sizes))
    sets = prompt_sets(tok, args.sources, n_max, args.prompt_tokens, getattr(args, "chat_template", "auto"))
    warm = sets[args.sources[0]][: max(args.batch_sizes)]
    for llm in engines.values():
        serve(llm, warm, max(args.batch_sizes), 4)
    return sets


def alternating(configs: Sequence[str], rep: int) -> list[str]:
    """Repeat `rep`'s order of the configurations: as given on even repeats, reversed on odd ones."""
    return list(configs) if rep % 2 == 0 else list(configs)[::-1]


# ---- per-run statistics -----------------------------------------------------------------------------
@dataclass
class RoundRecorder(SpecStats):
    """The engine's acceptance counters (adaspec.metrics.spec_stats) plus the verify rows of every
    decode round. Installed as `engine.spec_stats`, which the engine feeds with every completed
    round's verify lengths and accepted counts."""

    rounds: int = 0  # rounds with at least one decoding request
    rows: list[int] = field(default_factory=list)  # per decode round: B + sum(L)
    batch: list[int] = field(default_factory=list)  # per decode round: B

    def observe(self, verify_lens: list[int], num_accepted: list[int]) -> None:
        if verify_lens:
            self.rounds += 1
            self.rows.append(len(verify_lens) + sum(verify_lens))
            self.batch.append(len(verify_lens))
        super().observe(verify_lens, num_accepted)

    def summary(self) -> dict:
        return {
            **super().summary(),
            "decode_rounds": self.rounds,
            "mean_rows_per_request": (sum(self.rows) / sum(self.batch)) if self.batch else None,
            "mean_batch": (sum(self.batch) / len(self.batch)) if self.batch else None,
        }


@dataclass
class Run:
    """One measured run of one configuration over one prompt stream."""

    config: str
    outputs: list[list[int]]  # per prompt, in stream order
    wall_s: float
    cpu_s: float
    tpot_ms: list[float]  # per request with >= 2 tokens: (finish - first token) / (tokens - 1)
    stats: dict
    extra: dict = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return sum(len(o) for o in self.outputs)


def request_params(i: int, max_tokens: int, ignore_eos: bool, temperature: float):
    """The sampling parameters of the stream's request i: greedy, or at `temperature` with seed i (`serve`)."""
    from adaspec.sampling_params import SamplingParams

    if temperature > 0:
        return SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=ignore_eos, seed=i)
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=ignore_eos)


def serve(llm, prompts: Sequence[Prompt], batch_size: int, max_tokens: int, ignore_eos: bool = False,
          temperature: float = 0.0, arrival_gap_s: float = 0.0) -> Run:
    """Continuous batching with at most `batch_size` running requests: the prompt stream is fed in
    order and a finished request's slot goes to the next prompt. Greedy, `max_tokens` per request;
    with `temperature` > 0 request i samples with per-request seed i, which adaspec reproduces exactly
    under speculation (R-B5), so every configuration's output can still be compared with plain.

    `arrival_gap_s` > 0: staggered arrivals. Request i arrives `i * arrival_gap_s` seconds of process
    CPU time after the start and joins at the first step after that (when a slot is free), so the
    batch grows and shrinks as requests join and leave. When nothing runs, the clock skips to the
    next arrival (idle time is not work: it is in neither clock of the result)."""
    engine = llm.engine
    params_of = functools.partial(request_params, max_tokens=max_tokens, ignore_eos=ignore_eos, temperature=temperature)
    rec = RoundRecorder()
    engine.spec_stats = rec
    queue = list(enumerate(prompts))
    queue.reverse()
    index: dict[str, int] = {}
    done: dict[int, object] = {}
    running = 0
    gc.collect()
    gc.disable()
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        skipped = 0.0  # idle seconds skipped (staggered arrivals)

        def wait() -> float:  # seconds until the next queued request arrives (<= 0: it has)
            return queue[-1][0] * arrival_gap_s - (time.process_time() - c0 + skipped)

        while queue or engine.has_unfinished():
            while queue and running < batch_size and wait() <= 0:
                i, p = queue.pop()
                index[engine.add_request(list(p.ids), params_of(i))] = i
                running += 1
            if not engine.has_unfinished():  # idle until the next arrival: skip to it
                skipped += max(0.0, wait())
                continue
            for out in engine.step():
                if out.finished:
                    done[index[out.request_id]] = out
                    running -= 1
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        gc.enable()
    outs = [done[i] for i in range(len(prompts))]
    tpot = [1000 * (o.finish_time - o.first_token_time) / (len(o.token_ids) - 1)
            for o in outs if len(o.token_ids) > 1 and o.finish_time and o.first_token_time]
    return Run("", [list(o.token_ids) for o in outs], wall, cpu, tpot, rec.summary())


def compare_tokens(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> dict:
    """Sequences equal, and the first differing (prompt index, token index) if any."""
    equal, first = 0, None
    for i, (x, y) in enumerate(zip(a, b)):
        if list(x) == list(y):
            equal += 1
        elif first is None:
            k = next((j for j, (s, t) in enumerate(zip(x, y)) if s != t), min(len(x), len(y)))
            first = (i, k)
    return {"equal": equal, "sequences": len(a), "first_difference": first}


# ---- reporting ----------------------------------------------------------------------------------
def write_json(path, payload) -> None:
    """Write a bench's --json_out (its folder made first; values JSON cannot hold written as text)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1, default=str))
    print(f"wrote {path}")


def median(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, nd: int = 1, suffix: str = "") -> str:
    if v is None:
        return "–"
    return f"{v:.{nd}f}{suffix}"


def fmt_ratio(v) -> str:
    return "–" if v is None else f"{v:.2f}×"


def fmt_positions(ps: Sequence[float] | None) -> str:
    return "–" if not ps else " ".join(f"{p:.2f}" for p in ps)


def fmt_hist(h: dict | None, top: int = 6) -> str:
    if not h:
        return "–"
    total = sum(h.values())
    items = sorted(h.items(), key=lambda kv: -kv[1])[:top]
    items.sort(key=lambda kv: (int(kv[0]) if str(kv[0]).lstrip("-").isdigit() else 0, str(kv[0])))
    return " ".join(f"{k}:{100 * v / total:.0f}%" for k, v in items)


def markdown_table(head: Sequence[str], rows: Iterable[Sequence], align: str | None = None) -> str:
    rows = [list(map(str, r)) for r in rows]
    align = align or ("l" + "r" * (len(head) - 1))
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
