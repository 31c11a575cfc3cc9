"""--interleave for bench/adaptive.py: every configuration of a repeat serves the same stream at once, one engine round
of each in turn, and each is timed by its own rounds only (issue 13's floor cells).

Why: on the 2-vCPU VMs the machine's speed drifts by 10-30% over tens of seconds (NOTES.md; BENCHMARKS.md stop 48:
plain decoding 52, 36, 42 tok/s in three runs a minute apart). Whole runs in turn (A B B A, or one child process per
configuration) see different stretches of that drift, and a child's ratio to its own plain run spread 1.13-1.35x
for one fixed k; a 3% difference needed dozens of children. Interleaved, the engines' rounds alternate every ~20 ms,
so every configuration meets the same machine, and a repeat's ratio to plain is a paired measurement at round scale.

What it does not change: each engine is the product engine with its own scheduler, KV cache and controller, serving
the stream with continuous batching at most B requests (common.serve's rules, without staggered arrivals); only
the clock differs: a configuration's time is the sum of its own `engine.step()` calls (wall and process CPU), so the
other engines' rounds between two of its rounds are not charged to it. What it may change: the caches. Engines
built by bench/adaptive.py share the target's weights (common.share_target_weights); each keeps its own KV cache
and draft, so a round can start with less of its own state in cache than in a lone run. TPOT is not reported
(each request's wall clock includes the other engines' rounds). A fixed verify length L runs on a full-width engine
of its own with its plan hook installed for the repeat (adaptive_configs.engine_of); the oracle, whose reference is
plain's finished output, is refused."""

from __future__ import annotations

import contextlib
import functools
import gc
import time
from typing import Sequence

from bench import common
from bench.adaptive_configs import config_kind, engine_of
from bench.adaptive_hooks import Hook, begin, finish


class _Stream:
    """One engine serving the prompt stream: common.serve's loop, one round per `step()`, timed by its own rounds."""

    def __init__(self, llm, prompts, batch_size: int, params_of):
        self.engine, self.B, self.params_of = llm.engine, batch_size, params_of
        self.rec = common.RoundRecorder()
        self.engine.spec_stats = self.rec
        self.queue = list(enumerate(prompts))[::-1]
        self.index: dict[str, int] = {}
        self.done: dict[int, object] = {}
        self.running = 0
        self.wall = self.cpu = 0.0

    @property
    def active(self) -> bool:
        return bool(self.queue) or self.engine.has_unfinished()

    def step(self) -> None:
        while self.queue and self.running < self.B:
            i, p = self.queue.pop()
            self.index[self.engine.add_request(list(p.ids), self.params_of(i))] = i
            self.running += 1
        c0, t0 = time.process_time(), time.perf_counter()
        outs = self.engine.step()
        self.wall += time.perf_counter() - t0
        self.cpu += time.process_time() - c0
        for out in outs:
            if out.finished:
                self.done[self.index[out.request_id]] = out
                self.running -= 1

    def run(self, n: int) -> common.Run:
        outs = [self.done[i] for i in range(n)]
        return common.Run("", [list(o.token_ids) for o in outs], self.wall, self.cpu, [], self.rec.summary())


def serve_interleaved(llms: dict, prompts: Sequence, batch_size: int, max_tokens: int, ignore_eos: bool = False,
                      temperature: float = 0.0) -> dict[str, common.Run]:
    """{name: Run} of every engine of `llms` serving `prompts` (common.serve's rules and seeds), one round of each
    engine in turn (in `llms`' order) until all are done; each Run's clocks hold its own rounds only."""
    params_of = functools.partial(common.request_params, max_tokens=max_tokens, ignore_eos=ignore_eos,
                                  temperature=temperature)
    streams = {name: _Stream(llm, prompts, batch_size, params_of) for name, llm in llms.items()}
    gc.collect()
    gc.disable()
    try:
        live = list(streams.values())
        while live:
            for s in live:
                s.step()
            live = [s for s in live if s.active]
    finally:
        gc.enable()
    return {name: s.run(len(prompts)) for name, s in streams.items()}


def interleave_error(args) -> str | None:
    """Why --interleave cannot run these arguments (None: it can). Refused before any work: the oracle, a
    configuration with schedule overlap, or two configurations of one engine (their rounds
    would share it), the staggered stream (its arrivals run on one engine's clock), and --isolate / --paired (other
    designs)."""
    oracles = [n for n in args.configs if (config_kind(n)["hook"] or ("",))[0] == "oracle"]
    if oracles:
        return (f"--interleave: {', '.join(oracles)} verify against plain's finished greedy output, which an "
                "interleaved repeat does not have before it runs; drop them from --configs or run without --interleave")
    overlapped = [n for n in args.configs if n.endswith("_async")]
    if overlapped:
        return (f"--interleave: {', '.join(overlapped)} overlap a round with the next step's scheduling (a worker "
                "thread), so its work would run inside the other engines' timed rounds; drop them from --configs or "
                "run without --interleave")
    by_engine: dict[str, list[str]] = {}
    for n in args.configs:
        by_engine.setdefault(engine_of(n, interleave=True), []).append(n)
    shared = [names for names in by_engine.values() if len(names) > 1]
    if shared:
        return f"--interleave: {' and '.join(shared[0])} are one engine; keep one of them in --configs"
    if "staggered" in args.sources:
        return ("--interleave: the staggered stream's arrivals follow one engine's clock; drop it from --sources or "
                "run without --interleave")
    if args.isolate or args.paired:
        return "--interleave replaces --isolate / --paired (one process, rounds alternating); pick one"
    return None


def measure_interleaved(args, engines: dict, stream, B: int, rep: int) -> dict[str, common.Run]:
    """One repeat: every configuration of --configs at once (round order alternating across repeats, as whole runs
    alternate without --interleave); {name: Run} with each adaptive run's controller figures (adaptive_hooks)."""
    order = common.alternating(args.configs, rep)
    llms = {name: engines[engine_of(name, interleave=True)] for name in order}
    started = {name: begin(args, llm) for name, llm in llms.items()}
    with contextlib.ExitStack() as hooks:
        for name, llm in llms.items():
            if (hook := config_kind(name)["hook"]) is not None:  # a fixed verify length (the oracle is refused)
                hooks.enter_context(Hook(llm, "prefix", L=hook[1]))
        runs = serve_interleaved(llms, stream, B, args.max_tokens, args.ignore_eos, args.temperature)
    for name, run in runs.items():
        finish(llms[name], run, name, started[name])
    return runs


def repeat_ratios(runs: dict[str, list], clock: str) -> dict[str, list[float]]:
    """{config: per repeat, its tok/s over plain's in the same repeat} (the paired table's ratios)."""
    def rate(r):
        return r.tokens / (r.cpu_s if clock == "cpu" else r.wall_s)
    plain = runs["plain"]
    return {n: [rate(r) / rate(p) for r, p in zip(rs, plain)] for n, rs in runs.items() if n != "plain"}
