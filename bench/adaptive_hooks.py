"""Bench-side baselines and probes for bench/adaptive.py, on the engine's public injection points.

- fixed verify length L: `LLMEngine.plan_transform` shortens the full-width plan to
  `RoundPlan(w, min(L, cap) per request)`;
- oracle: the full-width engine runs with `RoundPlan(w, caps, "sync")`, a drafter wrapper that
  records the round's drafted tokens (`engine.rounds.drafter`), and an admission object with the
  `admit(P, round_id=, max_lens=, kv_len=)` method `RoundRunner._admit` calls in "sync" mode
  (`engine.rounds.verify_controller`), which verifies exactly the longest drafted prefix that
  matches the plain engine's greedy reference (every verified row is accepted, in float32);
- controller time: the adaptive control's `plan` / `observe` and the verify controller's
  `admit` / `allocate` are wrapped with timers on the instances (dropped again by `unwrap_timers`);
- cold controllers before every run: `AdaptiveControl.reset()` (same table, policy, geometry, lag), and the
  drafter's feedback (`reset_feedback()`: Suffix, MTP+Suffix).
"""

from __future__ import annotations

import functools
import time
from collections import Counter

from bench import common
from bench.adaptive_configs import config_kind

class RecordingDrafter:
    """Delegates to the engine's drafter and keeps the last round's (DraftBatch, DraftOutput)."""

    def __init__(self, inner):
        self.inner = inner
        self.last = None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def draft(self, batch):
        out = self.inner.draft(batch)
        self.last = (batch, out)
        return out


class OracleAdmission:
    """Sync-mode admission that verifies exactly the drafted prefix matching the greedy reference."""

    def __init__(self, engine, recorder: RecordingDrafter, reference: dict[tuple, list[int]]):
        self.engine, self.recorder, self.reference = engine, recorder, reference
        self.missing = 0

    def admit(self, P, round_id=None, max_lens=None, kv_len=None) -> list[int]:
        batch, out = self.recorder.last
        drafted = out.tokens.tolist()
        by_slot = {r.slot: r for r in self.engine.requests.values() if r.slot is not None and not r.finished}
        lens = []
        for b, slot in enumerate(batch.slots):
            req = by_slot[slot]
            ref = self.reference.get(tuple(req.prompt_token_ids))
            cap = len(drafted[b]) if max_lens is None else int(max_lens[b])
            j0, m = len(req.output_token_ids), 0  # next output index: the first drafted token's place
            if ref is None:
                self.missing += 1
            else:
                while m < cap and j0 + m < len(ref) and drafted[b][m] == ref[j0 + m]:
                    m += 1
            lens.append(m)
        return lens


class Hook:
    """Install a fixed-prefix or oracle plan on a full-width engine for one run (context manager)."""

    def __init__(self, llm, kind: str, L: int | None = None, reference: dict | None = None):
        self.llm, self.kind, self.L, self.reference = llm, kind, L, reference

    def __enter__(self):
        from adaspec.rounds import RoundPlan

        eng = self.llm.engine
        if self.kind == "prefix":
            L = self.L

            def transform(batch, p):
                if not p.num_steps:
                    return p
                return RoundPlan(p.num_steps, tuple(min(L, c) for c in p.verify_lens), round_id=p.round_id)
        else:
            self.recorder = RecordingDrafter(eng.rounds.drafter)
            eng.rounds.drafter = self.recorder
            self.oracle = OracleAdmission(eng, self.recorder, self.reference)
            eng.rounds.verify_controller = self.oracle

            def transform(batch, p):
                if not p.num_steps:
                    return p
                return RoundPlan(p.num_steps, p.verify_lens, "sync", round_id=p.round_id)
        eng.plan_transform = transform
        return self

    def __exit__(self, *exc):
        eng = self.llm.engine
        eng.plan_transform = None
        if self.kind == "oracle":
            eng.rounds.drafter = self.recorder.inner
            eng.rounds.verify_controller = None
        return False


class ControllerTimer:
    """Wraps the adaptive controller's entry points (plan, observe, admit, allocate) with timers."""

    def __init__(self, llm):
        self.seconds, self.calls = 0.0, 0
        ctl = llm.engine.control
        self._wrap(ctl, "plan")
        self._wrap(ctl, "observe")
        if ctl.verify is not None:
            self._wrap(ctl.verify, "admit")
            self._wrap(ctl.verify, "allocate")

    def _wrap(self, obj, name):
        time_calls(obj, name, self._add)

    def _add(self, seconds: float) -> None:
        self.seconds += seconds
        self.calls += 1


def time_calls(obj, name: str, add) -> None:
    """Shadow `obj.name` with an instance attribute that calls it and hands `add` its wall seconds (drop it again by
    deleting the attribute: `unwrap_timers`)."""
    f = getattr(obj, name)

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            add(time.perf_counter() - t0)

    setattr(obj, name, timed)


def unwrap_timers(llm) -> None:
    """Drop the timer wrappers of an earlier run (instance attributes shadowing the methods)."""
    ctl = llm.engine.control
    for obj, attrs in ((ctl, ("plan", "observe")), (ctl.verify, ("admit", "allocate"))):
        if obj is not None:
            for attr in attrs:
                obj.__dict__.pop(attr, None)


def _chosen(ctl) -> Counter:
    """The controller's histogram of chosen step counts (draft step) or row budgets (adaptive verify) so far."""
    return Counter(ctl.step.k_histogram if ctl.step is not None else ctl.verify.g_histogram)


def begin(args, llm):
    """Before a measured run of `llm`: cold controllers and drafter feedback (--reset_controllers: the Suffix drafts'
    score estimates and the hybrid's MTP window back to their priors), fresh controller timers; returns what `finish`
    needs (None for an engine without adaptive control)."""
    if args.reset_controllers and hasattr(llm.engine.drafter, "reset_feedback"):
        llm.engine.drafter.reset_feedback()
    ctl = llm.engine.control
    if ctl is None:
        return None
    unwrap_timers(llm)
    if args.reset_controllers:
        ctl.reset()
    return _chosen(ctl), ControllerTimer(llm)


def finish(llm, run, name: str, started) -> None:
    """After a measured run: its name, and for an adaptive engine its chosen k / G, controller time and exploration
    in `run.extra` (`started`: what `begin` returned)."""
    run.config = name
    if started is None:
        return
    before, timer = started
    ctl = llm.engine.control
    run.extra["chosen"] = {str(k): v for k, v in sorted((_chosen(ctl) - before).items())}
    run.extra["chosen_axis"] = "k" if ctl.step is not None else "G"
    run.extra["controller_s"] = timer.seconds
    run.extra["controller_calls"] = timer.calls
    run.extra["controller_share"] = timer.seconds / run.wall_s if run.wall_s else None
    explore = ctl.summary()
    run.extra["probe_rounds"] = explore.get("probes", 0)
    run.extra["probe_share"] = explore.get("probe_share", 0.0)
    run.extra["skipped_draft_rounds"] = explore.get("skipped_draft", 0)
    run.extra["cost_check_rounds"] = explore.get("cost_checks", 0)  # the draft step's served pricing
    run.extra["ceiling_batches"] = explore.get("ceiling_batches", 0)  # ... and its greedy ceiling (k_max, stop)
    if ctl.verify is not None and run.extra["skipped_draft_rounds"]:  # plain-floor rounds, no G chosen
        run.extra["chosen"]["plain"] = run.extra["skipped_draft_rounds"]


def measure(args, llm, name: str, stream, B: int, reference: dict | None, arrival_gap_s: float = 0.0):
    """One run of configuration `name` over `stream` at B (`arrival_gap_s`: staggered arrivals, common.serve)."""
    hook = config_kind(name)["hook"]
    started = begin(args, llm)
    serve = functools.partial(common.serve, arrival_gap_s=arrival_gap_s)
    if hook is None:
        run = serve(llm, stream, B, args.max_tokens, args.ignore_eos, args.temperature)
    elif hook[0] == "prefix":
        with Hook(llm, "prefix", L=hook[1]):
            run = serve(llm, stream, B, args.max_tokens, args.ignore_eos, args.temperature)
    else:
        with Hook(llm, "oracle", reference=reference) as h:
            run = serve(llm, stream, B, args.max_tokens, args.ignore_eos, args.temperature)
        run.extra["oracle_missing_reference"] = h.oracle.missing
    finish(llm, run, name, started)
    return run
