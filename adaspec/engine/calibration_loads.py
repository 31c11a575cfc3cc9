"""The synthetic requests calibration drives through the engine's real rounds (engine/calibrate.py).

`SyntheticLoad`: one prompt per request, each prefilled separately (any drafter). `SharedPrefixLoad`:
requests sharing one prompt, prefilled once and forked into the other slots (engine/fork.py), rewound
by length to that cached state (drafters with positional state, `copy_slot`).
"""

from __future__ import annotations

import torch

from ..rounds import RoundPlan
from ..sampling_params import SamplingParams
from .fork import fork_request, restore_request, snapshot_request

_GREEDY = SamplingParams(temperature=0, max_tokens=10**9, ignore_eos=True)


def _random_prompt(engine, prompt_len: int, generator: torch.Generator) -> list[int]:
    # ids from the lower part of the vocabulary: ordinary tokens, never special ones at the top
    high = max(8, min(engine.model_config.vocab_size, 32000))
    return torch.randint(3, high, (prompt_len,), generator=generator).tolist()


def _round(engine, plan: RoundPlan, max_verify: int) -> None:
    """One round of every running synthetic request under `plan` (through the real scheduler)."""
    batch = engine.scheduler.schedule(verify_cap=max_verify)
    decoding = sum(c.is_decode for c in batch.chunks)
    if len(plan.verify_lens) != decoding:  # prefill rounds and partial batches run plain
        plan = RoundPlan(plan.num_steps, (0,) * decoding) if plan.num_steps else RoundPlan.plain(decoding)
    result = engine.rounds.run(batch.chunks, plan)
    engine.commit(batch, result)


class SyntheticLoad:
    """`n` synthetic requests with their own prompts, each prefilled separately (any drafter)."""

    can_rewind = False

    def __init__(self, engine, n: int, prompt_len: int, generator: torch.Generator, width: int = 0):
        self.engine, self.width = engine, width
        self.requests = []
        for _ in range(n):
            req = engine.make_request(_random_prompt(engine, prompt_len, generator), _GREEDY)
            engine.enqueue(req)
            self.requests.append(req)
        while any(not r.prefilled for r in self.requests):
            self.round(RoundPlan(0, ()))

    def round(self, plan: RoundPlan) -> None:
        _round(self.engine, plan, plan.num_steps)

    @property
    def kv_len(self) -> int:
        return max(r.num_computed for r in self.requests)

    def close(self) -> None:
        for r in self.requests:
            self.engine.abort(r.request_id)


class SharedPrefixLoad(SyntheticLoad):
    """Synthetic requests sharing one prompt: one prefill, forks of it, rewinds by length.

    The source request is prefilled by normal rounds, then decoded once with the full draft width
    and nothing verified, so the draft has read the whole prompt; that state is the cached state
    every point starts from. `resize(n)` forks or drops requests (all at the cached state)."""

    can_rewind = True

    def __init__(self, engine, prompt_len: int, generator: torch.Generator, width: int):
        self.engine, self.width = engine, width
        src = engine.make_request(_random_prompt(engine, prompt_len, generator), _GREEDY)
        engine.enqueue(src)
        self.requests = [src]
        while not src.prefilled:
            self.round(RoundPlan(0, ()))
        self.round(RoundPlan(width, (0,)))  # the draft reads the prompt once; one token committed
        self.snapshots = {src.request_id: snapshot_request(engine, src)}

    def rewind(self) -> None:
        for r in self.requests:
            restore_request(self.engine, r, self.snapshots[r.request_id])

    def resize(self, n: int) -> None:
        self.rewind()
        while len(self.requests) > n:
            r = self.requests.pop()
            del self.snapshots[r.request_id]
            self.engine.abort(r.request_id)
        while len(self.requests) < n:
            r = fork_request(self.engine, self.requests[0])
            self.requests.append(r)
            self.snapshots[r.request_id] = snapshot_request(self.engine, r)
