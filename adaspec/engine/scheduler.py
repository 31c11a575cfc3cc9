"""Continuous batching (R-A3): who runs this step, with how many rows.

Every step shares one row budget (`max_num_batched_tokens`), and a round never computes more rows
than that. Running requests that finished their prompt decode every step and are charged one
row each; then prompts continue prefilling in chunks, then waiting requests are admitted
first-come first-served while a cache slot and budget remain; what is left pays for speculation:
each decoding request may verify at most `verify_cap` draft tokens (what its plan can verify: the
draft width, less near max_tokens or the context limit), and when the rows left do not cover
every cap they are shared evenly (water-filling, earlier requests first on a tie) and the caps
are cut (issue 13). Speculative rows are charged last because they are the only optional work:
a prompt is never stalled, nor a free slot left empty, to verify guesses. The cut caps travel on
the chunks (`ScheduledChunk.verify_cap`) and bound every plan, fixed or adaptive.
Requests join and leave between steps; a finished request's slot is reused by the next
admission. No tensors here: Python objects only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Union

from .request import Request, Status


@dataclass
class ScheduledChunk:
    request: Request
    start: int  # absolute position of the first new row (= request.num_computed)
    token_ids: list[int]  # the new rows' input tokens
    sample: bool  # True when the chunk reaches the newest token, so its last row is sampled
    verify_cap: int = 0  # decode chunks: most draft tokens the round may verify (rows = 1 + cap)

    @property
    def is_decode(self) -> bool:
        return self.request.prefilled


@dataclass
class ScheduledBatch:
    chunks: list[ScheduledChunk]

    @property
    def num_rows(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)

    @property
    def max_rows(self) -> int:
        """Rows the round computes at most: every chunk's rows plus the decode chunks' verify caps."""
        return self.num_rows + sum(c.verify_cap for c in self.chunks if c.is_decode)

    def __bool__(self) -> bool:
        return bool(self.chunks)


class Scheduler:
    def __init__(self, num_slots: int, max_num_batched_tokens: int):
        self.max_rows = max_num_batched_tokens
        self.free_slots = list(range(num_slots - 1, -1, -1))  # pop() hands out the lowest slot
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, verify_cap: Union[int, Callable[[Request], int]] = 0) -> ScheduledBatch:
        """This step's chunks. `verify_cap`: draft tokens a decoding request may verify at most (an
        int for all, or per request); the rows the prefill leaves are shared among these caps."""
        decoding = [r for r in self.running if r.prefilled]
        # decode never starves: max_num_batched_tokens >= slots is validated
        chunks = [ScheduledChunk(r, r.num_computed, r.tokens(r.num_computed, r.num_tokens), True) for r in decoding]
        budget = self.max_rows - len(decoding)
        for req in self.running:
            if budget <= 0:
                break
            if not req.prefilled:
                budget -= self._prefill_chunk(req, budget, chunks)
        while self.waiting and self.free_slots and budget > 0:
            req = self.waiting.popleft()
            req.slot, req.status = self.free_slots.pop(), Status.RUNNING
            self.running.append(req)
            budget -= self._prefill_chunk(req, budget, chunks)
        self.free_slots.sort(reverse=True)
        wanted = [max(0, verify_cap(r) if callable(verify_cap) else verify_cap) for r in decoding]
        for chunk, cap in zip(chunks, share_rows(wanted, budget)):
            chunk.verify_cap = cap
        return ScheduledBatch(chunks)

    @staticmethod
    def _prefill_chunk(req: Request, budget: int, chunks: list[ScheduledChunk]) -> int:
        start = req.num_computed
        stop = min(req.num_tokens, start + budget)
        chunks.append(ScheduledChunk(req, start, req.tokens(start, stop), stop == req.num_tokens))
        return stop - start

    def place(self, req: Request) -> bool:
        """Put an already prefilled request (a fork, engine/fork.py) straight into a free slot."""
        if not self.free_slots:
            return False
        req.slot, req.status = self.free_slots.pop(), Status.RUNNING
        self.running.append(req)
        return True

    def finish(self, req: Request) -> None:
        """Take a finished (or aborted) request out and recycle its slot."""
        if req in self.running:
            self.running.remove(req)
            self.free_slots.append(req.slot)
            self.free_slots.sort(reverse=True)
        elif req in self.waiting:
            self.waiting.remove(req)
        req.status = Status.FINISHED


def share_rows(wanted: list[int], rows: int) -> list[int]:
    """Split `rows` among requests that want `wanted[i]` each: everything if it fits, else
    water-filling (every request gets the same share up to its want; leftovers go to the earlier)."""
    if sum(wanted) <= rows:
        return list(wanted)
    got = [0] * len(wanted)
    left = max(0, rows)
    active = [i for i, w in enumerate(wanted) if w > 0]
    while left > 0 and active:
        share = max(1, left // len(active))
        for i in list(active):
            give = min(share, wanted[i] - got[i], left)
            got[i] += give
            left -= give
            if got[i] == wanted[i]:
                active.remove(i)
            if left == 0:
                break
    return got
