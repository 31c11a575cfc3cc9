"""The streaming trainer's batches (issue 11): self-distilled answers and raw windows, in a fixed order.

Each batch takes up to `gen_share` of its tokens from the target's answers (unseen ones first, in
the order generation wrote them, then repeats, each answer at most `repeats` times), the rest from
the raw code/prose windows in their seeded order. Positions are counted once per window, on its
first read, so "positions seen" is the number of distinct training positions. The pointers are
saved in the checkpoint (`state` / `restore`), so a resumed run reads what an uninterrupted one would.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import torch


class Sampler:
    """Batches of ~`tokens` tokens: gen windows first (up to gen_share; none once every answer
    written so far has been read `repeats` times), then raw windows."""

    def __init__(self, raw: list, data_dir: Path, tokens: int, gen_share: float, repeats: int = 2):
        self.raw, self.data_dir, self.tokens, self.gen_share, self.repeats = raw, data_dir, tokens, gen_share, repeats
        self.gen: list[torch.Tensor] = []
        self.valid: list[dict] = []
        self.chunks: set[int] = set()
        self.raw_i = self.gen_i = 0  # next raw window (past the end: a new epoch); next unseen answer
        self.gen_rep = 0  # repeat reads so far
        self.queue: deque[tuple[int, int]] = deque()  # (answer, reads left) in the order they are due

    def reload(self) -> None:
        mpath = self.data_dir / "gen_manifest.json"
        if not mpath.is_file():
            return
        try:
            done = json.loads(mpath.read_text())["chunks"]
        except (json.JSONDecodeError, KeyError):
            return
        for c in sorted(set(done) - self.chunks):
            for row in torch.load(self.data_dir / f"gen_{c:05d}.pt", weights_only=True):
                (self.valid.append(row) if row["split"] == "valid" else self.gen.append(row["tokens"]))
            self.chunks.add(c)

    def state(self) -> dict:
        return {"raw_i": self.raw_i, "gen_i": self.gen_i, "gen_rep": self.gen_rep, "gen_queue": list(self.queue)}

    def restore(self, state: dict) -> None:
        """Pointers of a checkpoint (one written before `gen_queue` existed had one repeat per answer)."""
        self.raw_i, self.gen_i = state["raw_i"], min(state["gen_i"], len(self.gen))
        self.gen_rep = state.get("gen_rep", 0)
        if "gen_queue" in state:
            self.queue = deque((a, left) for a, left in state["gen_queue"] if a < self.gen_i)
        else:
            first = min(state.get("gen_rep", max(0, state["gen_i"] - len(self.gen))), self.gen_i)
            self.queue = deque((a, 1) for a in range(first, self.gen_i))

    def next(self) -> tuple[list[torch.Tensor], int]:
        """(windows, distinct new positions in them). Answers: unseen ones first (in the order they
        were written, so answers that arrive later are still read once before any repeat), then
        repeats in first-read order, each answer at most `repeats` times in all; raw windows in
        order, wrapping around into a new epoch."""
        batch, used, new = [], 0, 0
        while self.gen and used < self.gen_share * self.tokens:
            if self.gen_i < len(self.gen):  # first visit
                a = self.gen_i
                self.gen_i += 1
                new += len(self.gen[a])
                if self.repeats > 1:
                    self.queue.append((a, self.repeats - 1))
            elif self.queue:  # a repeat
                a, left = self.queue.popleft()
                self.gen_rep += 1
                if left > 1:
                    self.queue.append((a, left - 1))
            else:
                break
            batch.append(self.gen[a])
            used += len(self.gen[a])
        while used < self.tokens:
            w = self.raw[self.raw_i % len(self.raw)][1]
            new += len(w) if self.raw_i < len(self.raw) else 0
            self.raw_i += 1
            batch.append(w)
            used += len(w)
        return batch, new
