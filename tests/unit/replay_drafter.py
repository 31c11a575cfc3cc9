"""A test double of the Drafter protocol (drafts/base.py), shared by the engine-level tests.

It rebuilds each slot's committed sequence from the refresh entries (so it also checks that
entries arrive in order and without gaps) and proposes the *reference* greedy continuation with
deterministic corruptions, so rounds accept every count from 0 to k.
"""

from __future__ import annotations

import torch

from adaspec.drafts.base import DraftBatch, DraftOutput


class ReplayDrafter:
    kind = "mtp"
    capture_layers = ()

    def __init__(self, references: list[list[int]], max_steps: int, corrupt_every: int = 3):
        self.references, self.max_steps, self.corrupt_every = references, max_steps, corrupt_every
        self.calls = 0

    def allocate(self, num_slots: int, max_len: int) -> None:
        self.seqs: dict[int, list[int]] = {s: [] for s in range(num_slots)}
        self.max_len = max_len

    def draft(self, batch: DraftBatch) -> DraftOutput:
        self.calls += 1
        assert batch.hidden.shape[0] == batch.next_tokens.shape[0] == sum(batch.entry_lens)
        tokens = torch.zeros(len(batch.slots), batch.num_steps, dtype=torch.long)
        nxt = batch.next_tokens.tolist()
        off = 0
        for b, (slot, start, n) in enumerate(zip(batch.slots, batch.entry_starts, batch.entry_lens)):
            seq = self.seqs[slot]
            if start == 0:
                seq.clear()
            # entry p carries t_{p+1}; the sequence must continue exactly where it stood
            assert start == len(seq), f"gap or overlap in refresh entries: start {start}, have {len(seq)}"
            seq.extend(nxt[off:off + n])
            off += n
            ref = next((r for r in self.references if r[1:len(seq) + 1] == seq), None)
            for j in range(batch.num_steps):
                pos = len(seq) + 1 + j  # position of the proposed token
                good = ref[pos] if ref is not None and pos < len(ref) else 3
                tokens[b, j] = good if (pos * 7 + j) % self.corrupt_every else (good + 1) % 100 + 3
        # scores that vary and weakly predict acceptance, so adaptive admission has something to rank
        scores = torch.where(tokens % 3 == 0, 0.3, 0.8)
        return DraftOutput(tokens=tokens, scores=scores.float())
