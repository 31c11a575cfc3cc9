"""Continuous batching (R-A3): who runs this step, with how many rows.

Every step shares one row budget (`max_num_batched_tokens`). Running requests that finished their
prompt decode first (each needs `rows_per_decode` rows: 1, or 1 + draft tokens when speculating),
then prompts continue prefilling in chunks, then waiting requests are admitted first-come
first-served while a cache slot and budget remain. Requests join and leave between steps; a
finished request's slot is reused by the next admission. No tensors here: Python objects only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .request import Request, Status


@dataclass
class ScheduledChunk:
    request: Request
    start: int  # absolute position of the first new row (= request.num_computed)
    token_ids: list[int]  # the new rows' input tokens
    sample: bool  # True when the chunk reaches the newest token, so its last row is sampled

    @property
    def is_decode(self) -> bool:
        return self.request.prefilled


@dataclass
class ScheduledBatch:
    chunks: list[ScheduledChunk]

    @property
    def num_rows(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)

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

    def schedule(self, rows_per_decode: int = 1) -> ScheduledBatch:
        budget, chunks = self.max_rows, []
        decoding = [r for r in self.running if r.prefilled]
        for req in decoding:  # decode never starves: max_num_batched_tokens >= slots is validated
            chunks.append(ScheduledChunk(req, req.num_computed, req.tokens(req.num_computed, req.num_tokens), True))
            budget -= rows_per_decode
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
        return ScheduledBatch(chunks)

    @staticmethod
    def _prefill_chunk(req: Request, budget: int, chunks: list[ScheduledChunk]) -> int:
        start = req.num_computed
        stop = min(req.num_tokens, start + budget)
        chunks.append(ScheduledChunk(req, start, req.tokens(start, stop), stop == req.num_tokens))
        return stop - start

    def finish(self, req: Request) -> None:
        """Take a finished (or aborted) request out and recycle its slot."""
        if req in self.running:
            self.running.remove(req)
            self.free_slots.append(req.slot)
            self.free_slots.sort(reverse=True)
        elif req in self.waiting:
            self.waiting.remove(req)
        req.status = Status.FINISHED
