"""MTP+Suffix: per request and per round, the draft source with more predicted tokens per unit cost (issue 10).

Every round the Suffix index is refreshed and looked up first (host only, drafts/suffix.py). For
request b with a Suffix proposal of length l and scores s, and the MTP draft at k steps:

    value_suffix = max_{l' <= l} (1 + sum_{j<=l'} prod_{i<=j} s_i) / (1 + VERIFY_ROW_COST * l')
    value_mtp    = max_{j <= k} (1 + sum_{i<=j} a_i) / (1 + (VERIFY_ROW_COST + MTP_STEP_COST) * j)

with a_j MTP's windowed prefix acceptance (adaptive/feedback.AcceptanceWindow over the requests
MTP proposed for, from completed rounds only, same lag as every other feedback; prior 0.5^j until
then). Costs are in units of one request's plain-decode round: a verified row adds VERIFY_ROW_COST,
an MTP draft step MTP_STEP_COST (stated constants, of the order measured for the bundled 135M
model on CPU; BENCHMARKS.md). The Suffix proposes where value_suffix >= value_mtp, MTP elsewhere. MTP's depth j <= k is the one
with the highest value_mtp (its deeper tokens are rarely accepted, the Suffix draft's often are, so
one k for both would waste either); with adaptive target verify every source drafts the full width
(R-D1: the verify controller decides what is verified), `mtp_full_width`.

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
                 verify_row_cost: float = VERIFY_ROW_COST, mtp_step_cost: float = MTP_STEP_COST,
                 mtp_full_width: bool = False):
        self.mtp = mtp
        self.mtp_full_width = mtp_full_width  # adaptive verify: every source drafts the full width (R-D1)
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
        self.calls = 0

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
        self.suffix_rows = self.mtp_rows = self.mtp_skipped = self.calls = 0
        self.host_seconds = 0.0

    def allocate(self, num_slots: int, max_len: int) -> None:
        self.mtp.allocate(num_slots, max_len)
        self.suffix.allocate(num_slots, max_len)

    def copy_slot(self, src: int, dst: int, length: int) -> bool:
        from .base import copy_draft_slot

        return copy_draft_slot(self.mtp, src, dst, length) and self.suffix.copy_slot(src, dst, length)

    def mtp_choice(self, k: int) -> tuple[int, float]:
        """(MTP depth, its value): the depth j <= k with the most predicted tokens per unit cost
        (ties to the smaller j), or k itself when the full width is required."""
        with self._lock:
            for lens, acc in self.feedback.release(self._planning):
                self.window.observe(lens, acc)
        a = self.window.prefix_acceptance()[:k]
        unit = self.verify_row_cost + self.mtp_step_cost
        values = [(1.0 + float(a[:j].sum())) / (1.0 + unit * j) for j in range(1, k + 1)]
        j = k if self.mtp_full_width else max(range(1, k + 1), key=lambda i: (values[i - 1], -i))
        return j, values[j - 1]

    def suffix_value(self, prop) -> float:
        """The best value over the proposal's prefixes (its deeper tokens cost rows, no draft step)."""
        if not prop.length:
            return float("-inf")
        path, total, best = 1.0, 0.0, float("-inf")
        for j, s in enumerate(prop.scores[:prop.length], start=1):
            path *= s
            total += path
            best = max(best, (1.0 + total) / (1.0 + self.verify_row_cost * j))
        return best

    def draft(self, batch: DraftBatch) -> DraftOutput:
        t0 = time.perf_counter()
        K = batch.num_steps
        self.suffix.refresh(batch)
        props = self.suffix.propose(batch.slots, K, batch.round_id)
        use_suffix = [False] * len(props)
        depth = K
        if K:
            self._planning = batch.round_id
            depth, m_value = self.mtp_choice(K)
            use_suffix = [self.suffix_value(p) >= m_value for p in props]
        need_mtp = K > 0 and not all(use_suffix)
        t1 = time.perf_counter()
        out = self.mtp.draft(dataclasses.replace(batch, num_steps=depth if need_mtp else 0))
        t2 = time.perf_counter()
        if need_mtp and depth < K:  # MTP rows propose `depth` tokens; the rest is filler with score 0
            B = len(props)
            pad = out.tokens[:, -1:].expand(B, K - depth)
            out = DraftOutput(torch.cat([out.tokens, pad], dim=1),
                              torch.cat([out.scores, out.scores.new_zeros(B, K - depth)], dim=1))
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
            result = DraftOutput(out.tokens, out.scores, lengths=[depth] * len(props))
        else:
            s = to_output(props, K, out.tokens.device)
            rows = torch.tensor([b for b, u in enumerate(use_suffix) if u], dtype=torch.long, device=out.tokens.device)
            tokens, scores = out.tokens.clone(), out.scores.clone()
            tokens[rows], scores[rows] = s.tokens[rows], s.scores[rows]
            lengths = [p.length if u else depth for p, u in zip(props, use_suffix)]
            result = DraftOutput(tokens, scores, lengths=lengths)
        self.host_seconds += (t1 - t0) + (time.perf_counter() - t2)
        self.calls += 1
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
        return {**self.suffix.stats(), "draft_calls": self.calls, "draft_host_seconds": self.host_seconds,
                "suffix_rows": self.suffix_rows,
                "mtp_rows": self.mtp_rows, "mtp_refresh_only_rounds": self.mtp_skipped}
