"""The Suffix draft: model-free proposals copied from the request's own tokens (issue 10).

Per slot it keeps the committed tokens t_0..t_n in an incremental n-gram index
(drafts/suffix_index.py). Each round it finds the longest earlier n-gram (2..8 tokens) that ends
the context and proposes the k tokens that followed it; with `--suffix_global_cache=N` it also
looks in the outputs of the last N finished requests and takes whichever match is longer (the
request's own on a tie). Scores are the online acceptance estimate of drafts/suffix_scores.py.

Tokens come from the host: the round runner hands the committed tokens of the new refresh entries
as Python lists (`DraftBatch.tokens_host`, set because this drafter declares `reads_tokens`), the
only tokens that ever enter the index, so rejected drafts never do (rollback is free). Nothing here
touches the device except building the [B, k] output tensors from host lists (one host-to-device
copy each, no device-to-host read). The time spent in `draft()` is accumulated in `host_seconds`.

A request with no match proposes nothing: its row of `tokens` is filler (the newest token) with
score 0 and `lengths[b] = 0`, so a fixed-k round verifies no rows for it (RoundRunner trims fixed
plans to `lengths`), adaptive verify never admits it (path probability 0), and when nothing
matches a round costs what plain decoding costs.

Feedback: `observe(round_id, verify_lens, num_accepted)` after each completed round (the engine's
normal result path) pairs the round's outcome with the match features recorded at proposal time;
the estimate is updated with the lag of adaptive/feedback.py (`set_lag`).
"""

from __future__ import annotations

import time

import torch

from .base import DraftBatch, DraftOutput
from .suffix_index import GlobalCache, SuffixIndex
from .suffix_scores import SuffixScores

SUFFIX_MAX_STEPS = 16
MAX_NGRAM = 8
MIN_MATCH = 2
FINGERPRINT = f"suffix:v1:ngram{MIN_MATCH}-{MAX_NGRAM}"
_KEEP_ROUNDS = 64  # proposal records kept for rounds whose result never comes back (a failed round)


class Proposal:
    __slots__ = ("tokens", "scores", "length", "n", "freq")

    def __init__(self, tokens, scores, length, n=0, freq=0):
        self.tokens, self.scores, self.length, self.n, self.freq = tokens, scores, length, n, freq


class SuffixDrafter:
    kind = "suffix"
    capture_layers: tuple[int, ...] = ()
    reads_tokens = True  # RoundRunner passes DraftBatch.tokens_host

    def __init__(self, max_steps: int = SUFFIX_MAX_STEPS, global_cache: int = 0, lag: int = 1,
                 max_ngram: int = MAX_NGRAM, min_match: int = MIN_MATCH):
        self.max_steps, self.max_ngram, self.min_match = max_steps, max_ngram, min_match
        self.global_cache = GlobalCache(global_cache, max_ngram) if global_cache > 0 else None
        self.estimator = SuffixScores(lag)
        self.fingerprint = FINGERPRINT
        self.slots: list[SuffixIndex] = []
        self.prompt_len: list[int] = []
        self._records: dict[int, list] = {}
        self.host_seconds = 0.0
        self.calls = 0

    def set_lag(self, lag: int) -> None:
        self.estimator.set_lag(lag)

    def reset_feedback(self) -> None:
        """Back to the stated prior, an empty global cache and zeroed counters (benchmarks: one run each)."""
        self.estimator = SuffixScores(self.estimator.feedback.lag)
        self._records.clear()
        if self.global_cache is not None:
            self.global_cache = GlobalCache(self.global_cache.capacity, self.max_ngram)
        self.host_seconds, self.calls = 0.0, 0

    # ---- Drafter protocol ---------------------------------------------------------------------
    def allocate(self, num_slots: int, max_len: int) -> None:
        self.slots = [SuffixIndex(self.max_ngram) for _ in range(num_slots)]
        self.prompt_len = [0] * num_slots

    def copy_slot(self, src: int, dst: int, length: int) -> bool:
        """Positional state: the tokens t_0..t_length (entries of positions [0, length)) are copied."""
        if src != dst:
            self.slots[dst] = self.slots[src].copy_prefix(length + 1)
            self.prompt_len[dst] = self.prompt_len[src]
        return True

    def draft(self, batch: DraftBatch) -> DraftOutput:
        t0 = time.perf_counter()
        K = batch.num_steps
        if not 0 <= K <= self.max_steps:
            raise ValueError(f"Suffix draft proposes 0..{self.max_steps} tokens per round, asked for {K}")
        self.refresh(batch)
        props = self.propose(batch.slots, K, batch.round_id)
        self.record(batch.round_id, props)
        out = to_output(props, K, batch.next_tokens.device)
        self.host_seconds += time.perf_counter() - t0
        self.calls += 1
        return out

    # ---- pieces shared with the MTP+Suffix hybrid ---------------------------------------------
    def refresh(self, batch: DraftBatch) -> None:
        if batch.tokens_host is None:
            raise RuntimeError("the Suffix draft needs DraftBatch.tokens_host (the round runner sets it for drafters "
                               "with reads_tokens = True)")
        for slot, start, toks in zip(batch.slots, batch.entry_starts, batch.tokens_host):
            idx = self.slots[slot]
            if start == 0:
                idx.reset()
                self.prompt_len[slot] = len(toks) - 1  # the first call carries the prompt; t_P is output
                idx.extend(toks)
            elif start < len(idx):  # t_start is held already; past it only after a rewind (calibration)
                idx.truncate(start + 1)
                idx.extend(toks[1:])
            elif start == len(idx):
                idx.extend(toks)
            else:
                raise RuntimeError(f"Suffix draft: refresh entries of slot {slot} start at {start} but it holds "
                                   f"{len(idx)} tokens (entries must arrive without gaps)")

    def propose(self, slots, K: int, round_id=None) -> list[Proposal]:
        """One proposal per slot: up to K tokens, their scores, and the match features."""
        self.estimator.release(round_id)
        out = []
        for slot in slots:
            idx = self.slots[slot]
            filler = idx.tokens[-1] if idx.tokens else 0
            best = idx.longest(self.min_match) if K else None
            source = None
            if best is not None:
                n, freq, c = best
                source = (n, freq, None, c)
            if K and self.global_cache is not None:
                g = self.global_cache.longest(idx.tokens, self.min_match)
                if g is not None and (source is None or g[0] > source[0]):
                    source = g
            if source is None:
                out.append(Proposal([filler] * K, [0.0] * K, 0))
                continue
            n, freq, other, c = source
            if other is None:
                toks = idx.continuation(c, K)
            else:  # a finished request's output: copy what it has, no further
                toks = other[c:c + K]
            length = len(toks)
            scores = self.estimator.scores(n, freq, length) + [0.0] * (K - length)
            out.append(Proposal(toks + [filler] * (K - length), scores, length, n, freq))
        return out

    def record(self, round_id, props: list[Proposal], use=None) -> None:
        """Remember the match features of round `round_id` until its result is observed."""
        if round_id is None:
            return
        self._records[round_id] = [(p.n, p.freq) if p.length and (use is None or use[b]) else None
                                   for b, p in enumerate(props)]
        while len(self._records) > _KEEP_ROUNDS:
            self._records.pop(next(iter(self._records)))

    def observe(self, round_id, verify_lens, num_accepted) -> None:
        """A completed round's outcome (engine._collect); applied with the lag (suffix_scores.py)."""
        feats = self._records.pop(round_id, None) if round_id is not None else None
        if feats is None:
            return
        records = [(f[0], f[1], int(L), int(m)) for f, L, m in zip(feats, verify_lens, num_accepted)
                   if f is not None and L > 0]
        self.estimator.push(round_id, records)

    def release_slot(self, slot: int) -> None:
        """The request in `slot` finished: its output joins the global cache (if any)."""
        if self.global_cache is not None and 0 <= slot < len(self.slots):
            idx = self.slots[slot]
            self.global_cache.add(idx.tokens[self.prompt_len[slot]:])

    def stats(self) -> dict:
        return {"draft_calls": self.calls, "draft_host_seconds": self.host_seconds,
                "score_rounds_applied": self.estimator.rounds_applied,
                "global_cache_outputs": len(self.global_cache) if self.global_cache is not None else 0}


def to_output(props: list[Proposal], K: int, device) -> DraftOutput:
    tokens = torch.tensor([p.tokens for p in props], dtype=torch.long).reshape(len(props), K)
    scores = torch.tensor([p.scores for p in props], dtype=torch.float32).reshape(len(props), K)
    if torch.device(device).type != "cpu":
        tokens, scores = tokens.to(device, non_blocking=True), scores.to(device, non_blocking=True)
    return DraftOutput(tokens, scores, lengths=[p.length for p in props])
