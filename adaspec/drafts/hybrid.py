"""MTP+Suffix: per request and per round, the draft source with more predicted tokens per unit cost (issue 10).

Every round the Suffix index is refreshed and looked up first (host only, drafts/suffix.py). For
request b with a Suffix proposal of length l and scores s, and the MTP draft at k steps:

    value_suffix = (1 + sum_j prod_{i<=j} s_i) / (1 + VERIFY_ROW_COST * l)
    value_mtp    = (1 + sum_{j<=k} a_j)        / (1 + (VERIFY_ROW_COST + MTP_STEP_COST) * k)

with a_j MTP's windowed prefix acceptance (adaptive/feedback.AcceptanceWindow over the requests
MTP proposed for, from completed rounds only, same lag as every other feedback; prior 0.5^j until
then). Costs are in units of one request's plain-decode round: a verified row adds VERIFY_ROW_COST,
an MTP draft step MTP_STEP_COST (stated constants, of the order measured for the bundled 135M
model on CPU; BENCHMARKS.md). The Suffix proposes where value_suffix >= value_mtp, MTP elsewhere.

MTP's context stays correct whichever source proposed: its `draft()` is called every round with
*all* refresh entries (target features of committed tokens only), with num_steps = k when at least
one request takes the MTP draft and num_steps = 0 (refresh only) when none does, so a round where
the Suffix wins everywhere pays no MTP draft forward. Outputs per request come from its source
(tokens, scores, `lengths`); MTP rows propose the full k.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import torch

from ..adaptive.feedback import DEFAULT_PRIOR_RATE, AcceptanceWindow, LaggedFeedback
from .base import DraftBatch, DraftOutput
from .suffix import SuffixDrafter, to_output

VERIFY_ROW_COST = 0.10
MTP_STEP_COST = 0.10
MTP_WINDOW = 20


class MTPSuffixDrafter:
    kind = "mtp+suffix"
    reads_tokens = True

    def __init__(self, mtp, suffix: SuffixDrafter | None = None, lag: int = 1,
                 verify_row_cost: float = VERIFY_ROW_COST, mtp_step_cost: float = MTP_STEP_COST):
        self.mtp = mtp
        self.suffix = suffix or SuffixDrafter(lag=lag)
        self.capture_layers = tuple(mtp.capture_layers)
        self.max_steps = min(mtp.max_steps, self.suffix.max_steps)
        self.verify_row_cost, self.mtp_step_cost = verify_row_cost, mtp_step_cost
        self.fingerprint = f"{getattr(mtp, 'fingerprint', type(mtp).__name__)}+{self.suffix.fingerprint}"
        self.window = AcceptanceWindow(self.max_steps, MTP_WINDOW, DEFAULT_PRIOR_RATE)
        self.feedback: LaggedFeedback = LaggedFeedback(lag)
        self._lock = threading.Lock()
        self._sources: dict[int, list[bool]] = {}
        self._planning = None
        self.suffix_rows = self.mtp_rows = 0  # requests each source proposed for
        self.mtp_skipped = 0  # rounds that ran MTP as refresh only
        self.host_seconds = 0.0  # time in draft() outside the MTP forward

    def set_lag(self, lag: int) -> None:
        self.suffix.set_lag(lag)
        with self._lock:
            self.feedback.lag = int(lag)

    def reset_feedback(self) -> None:
        """Both sources back to their priors (benchmarks: one run each)."""
        self.suffix.reset_feedback()
        with self._lock:
            self.window = AcceptanceWindow(self.max_steps, MTP_WINDOW, DEFAULT_PRIOR_RATE)
            self.feedback = LaggedFeedback(self.feedback.lag)
        self._sources.clear()
        self.suffix_rows = self.mtp_rows = self.mtp_skipped = 0
        self.host_seconds = 0.0

    def allocate(self, num_slots: int, max_len: int) -> None:
        self.mtp.allocate(num_slots, max_len)
        self.suffix.allocate(num_slots, max_len)

    def copy_slot(self, src: int, dst: int, length: int) -> bool:
        from .base import copy_draft_slot

        return copy_draft_slot(self.mtp, src, dst, length) and self.suffix.copy_slot(src, dst, length)

    def mtp_value(self, k: int) -> float:
        with self._lock:
            for lens, acc in self.feedback.release(self._planning):
                self.window.observe(lens, acc)
        a = self.window.prefix_acceptance()[:k]
        return (1.0 + float(a.sum())) / (1.0 + (self.verify_row_cost + self.mtp_step_cost) * k)

    def suffix_value(self, prop) -> float:
        if not prop.length:
            return float("-inf")
        path, total = 1.0, 0.0
        for s in prop.scores[:prop.length]:
            path *= s
            total += path
        return (1.0 + total) / (1.0 + self.verify_row_cost * prop.length)

    def draft(self, batch: DraftBatch) -> DraftOutput:
        t0 = time.perf_counter()
        K = batch.num_steps
        self.suffix.refresh(batch)
        props = self.suffix.propose(batch.slots, K, batch.round_id)
        use_suffix = [False] * len(props)
        if K:
            self._planning = batch.round_id
            m_value = self.mtp_value(K)
            use_suffix = [self.suffix_value(p) >= m_value for p in props]
        need_mtp = K > 0 and not all(use_suffix)
        t1 = time.perf_counter()
        out = self.mtp.draft(dataclasses.replace(batch, num_steps=K if need_mtp else 0))
        t2 = time.perf_counter()
        self.suffix.record(batch.round_id, props, use_suffix)
        if batch.round_id is not None:
            self._sources[batch.round_id] = use_suffix
            while len(self._sources) > 64:
                self._sources.pop(next(iter(self._sources)))
        n_suffix = sum(use_suffix)
        self.suffix_rows += n_suffix
        self.mtp_rows += len(props) - n_suffix if K else 0
        self.mtp_skipped += int(K > 0 and not need_mtp)
        if not need_mtp:
            result = to_output(props, K, batch.next_tokens.device)
        elif n_suffix == 0:
            result = DraftOutput(out.tokens, out.scores, lengths=[K] * len(props))
        else:
            s = to_output(props, K, out.tokens.device)
            rows = torch.tensor([b for b, u in enumerate(use_suffix) if u], dtype=torch.long, device=out.tokens.device)
            tokens, scores = out.tokens.clone(), out.scores.clone()
            tokens[rows], scores[rows] = s.tokens[rows], s.scores[rows]
            lengths = [p.length if u else K for p, u in zip(props, use_suffix)]
            result = DraftOutput(tokens, scores, lengths=lengths)
        self.host_seconds += (t1 - t0) + (time.perf_counter() - t2)
        return result

    def observe(self, round_id, verify_lens, num_accepted) -> None:
        self.suffix.observe(round_id, verify_lens, num_accepted)
        src = self._sources.pop(round_id, None) if round_id is not None else None
        if src is None:
            return
        lens = [int(L) for L, u in zip(verify_lens, src) if not u]
        acc = [int(m) for m, u in zip(num_accepted, src) if not u]
        if any(lens):
            with self._lock:
                self.feedback.push(round_id, (lens, acc))

    def release_slot(self, slot: int) -> None:
        self.suffix.release_slot(slot)

    def stats(self) -> dict:
        return {**self.suffix.stats(), "draft_host_seconds": self.host_seconds, "suffix_rows": self.suffix_rows,
                "mtp_rows": self.mtp_rows, "mtp_refresh_only_rounds": self.mtp_skipped}
