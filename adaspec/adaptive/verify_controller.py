"""Adaptive target verify: the per-round controller (R-D1, R-D3, R-D4, R-F6).

`VerifyController` keeps the lagged per-request scores of earlier rounds (feedback.LaggedFeedback)
and plans each round with the budget functions of `verify_budget` (whose docstring states the
ranking, the two budget modes and why both preserve the target distribution): asynchronously, a
row budget G chosen on the host from lagged rounds only and filled on the device; synchronously,
DSpark's early-stopping admission after the draft. Uncovered costs fall back to full width, and the
decision says why.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from ..geometry import first_covering
from .draft_calibration import ConfidenceRatio
from .feedback import DEFAULT_PRIOR_RATE, LaggedFeedback
from .host_paths import clean_rows, paths_from_scores, scaled_rows
from .verify_budget import (BudgetDecision, CostFn, PadRowsFn, allocate_in_budget, budget_drafts, budget_from_lagged,
                            cap_list, full_width_rows, sync_admission, sync_gain_from_lagged, sync_outcome)
from .verify_served import ServedRows

# the sync gate's second opinion (predicts_gain): the newest rounds holding this many request-rounds
GATE_REQUESTS = 16


# ---- controller -------------------------------------------------------------------------------
@dataclass(frozen=True)
class VerifyDecision:
    round_id: int | None
    batch_size: int
    bcap: int | None
    mode: str  # "sync" | "async"
    G: int | None
    reason: str
    predicted: float | None = None  # predicted tokens per ms of the chosen G (None on fallback)


class VerifyController:
    """Holds the lagged feedback and plans verify budgets (R-D1, R-D3, R-D4).

    Asynchronous round n: `plan_budget(B, round_id=n)` on the host before the draft runs (sees only
    rounds <= n - lag observed via `observe`), then `allocate(P, G)` on the device between draft and
    target. Synchronous: `admit(P)` after the draft (host). `observe(scores, round_id)` with the
    round's per-request scores from the normal result path (RoundResult.draft_scores, R-C4).
    """

    def __init__(
        self,
        width: int,
        cost_ms: CostFn,
        pad_requests: Callable[[int], "int | None"],
        target_buckets: dict[int, Sequence[int]],
        pad_rows: PadRowsFn | None = None,
        *,
        mode: str = "async",
        lag: int = 2,
        budget_window: int = 1,
        covers: Callable[[int, "int | None"], bool] | None = None,
        history: int = 1024,
        plain_ms: Callable[[int, "int | None"], "float | None"] | None = None,
        prior_rate: float | None = DEFAULT_PRIOR_RATE,
        served: bool = True,
    ):
        if mode not in ("sync", "async"):
            raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        if budget_window < 1:
            raise ValueError(f"budget_window must be >= 1, got {budget_window}")
        if prior_rate is not None and not 0.0 <= prior_rate <= 1.0:
            raise ValueError(f"prior_rate must be in [0, 1] (or None: full width until feedback), got {prior_rate}")
        self.width, self.mode = width, mode
        # cold start (issue 13): before any lagged round is visible, budgets are chosen from the cost table
        # under a prior, every request's path probabilities prior_rate^j (the draft step's prior), not at
        # full width; None keeps R-D4's literal fallback to full width
        self.prior_rate = prior_rate
        self.table_ms, self.pad_requests, self.covers = cost_ms, pad_requests, covers
        self.plain_ms = plain_ms  # (bcap, kv_len) -> ms of a plain round, or None (adaptive/floor.py)
        # sync mode with plain costs: drafted rounds priced as served once timed (verify_served.py), else the table
        self.served = (ServedRows(cost_ms, lambda bcap: plain_ms(bcap, None))
                       if served and mode == "sync" and plain_ms is not None else None)
        self.cost_ms = self.served.cost_ms if self.served is not None else cost_ms
        self._served_version = 0
        self.target_buckets = {int(b): sorted(g) for b, g in target_buckets.items()}
        self.pad_rows = pad_rows or (lambda bcap, rows: first_covering(self.target_buckets.get(bcap, ()), rows))
        self.feedback: LaggedFeedback[tuple] = LaggedFeedback(lag)
        # sync mode: the stream's correction of the draft's confidences and the gate's window (draft_calibration.py)
        self.confidence = ConfidenceRatio() if mode == "sync" else None
        self.recent: deque[tuple[list[list[float]], dict]] = deque()  # (P, its early-stop outcomes by key), newest last
        self._memo: dict[tuple, BudgetDecision] = {}
        self.lagged: deque[list[list[float]]] = deque(maxlen=budget_window)  # newest visible rounds' P
        self.decisions: deque[VerifyDecision] = deque(maxlen=history)
        self.g_histogram: Counter[int] = Counter()

    def observe(self, scores, round_id: int | None = None, verify_lens=None, accepted=None) -> None:
        """Per-request scores [B_r, w] of a completed round (conditional predictors, not paths); with the
        same requests' verified and accepted draft tokens, sync mode also corrects the draft's confidences
        (draft_calibration.py)."""
        if not (isinstance(scores, list) and all(isinstance(r, list) and len(r) == self.width for r in scores)):
            scores = np.asarray(scores, dtype=np.float64).reshape(-1, self.width).tolist()
        P = paths_from_scores(scores)  # lists (host_paths.py)
        counts = (ConfidenceRatio.counts(P, verify_lens, accepted)
                  if self.confidence is not None and verify_lens is not None and accepted is not None else None)
        self.feedback.push(round_id, (P, counts))

    def observe_round(self, round_id: int, verify_lens, drafted: bool, ms: float, pure: bool,
                      accepted=None) -> None:
        """A completed round's time as served, with the draft tokens it verified (and `accepted`) per request and
        whether it drafted (a drafted round is timed at its padded rows); `pure`: decode only, not a probe
        (verify_served.py). Ignored without served pricing."""
        B = len(verify_lens)
        bcap = self.pad_requests(B) if self.served is not None and B else None
        if bcap is None:
            return
        G = self.pad_rows(bcap, B + sum(verify_lens)) if drafted else None
        self.served.record(round_id, bcap, G, ms, pure and (G is not None or not drafted),
                           None if accepted is None else B + sum(accepted), B)

    def _reprice(self) -> None:
        """Drop the memoised estimates once a served price changed (they were computed at the old one)."""
        if self.served is not None and self.served.version != self._served_version:
            self._served_version = self.served.version
            self._memo.clear()
            for _, outcomes in self.recent:
                outcomes.clear()

    def _uncovered(self, bcap: int, kv_len: int | None) -> str | None:
        if self.covers is not None and not self.covers(bcap, kv_len):
            return f"fallback: bcap={bcap}, kv_len={kv_len} outside the calibrated coverage; full width"
        return None

    def plan_budget(self, B: int, round_id: int | None = None, max_lens=None, kv_len: int | None = None,
                    token_value: float = 1.0) -> int:
        """Padded target rows G for round `round_id`, decided before its draft runs (R-D4); `token_value`:
        verify_budget's weight of the extra tokens (adaptive/closed_batch.py)."""
        if B < 1:
            raise ValueError(f"batch size must be >= 1, got {B}")
        self._take_feedback(round_id)
        bcap = self.pad_requests(B)
        if bcap is None or bcap not in self.target_buckets:
            # more requests than the largest prepared bucket (e.g. --graph_decode_batch_sizes below
            # --max_seqs_per_batch): no cost is known, so verify full width, as sync mode does
            G = B * (self.width + 1)
            self.decisions.append(VerifyDecision(round_id, B, bcap, "async", G,
                                                 f"fallback: no prepared request bucket covers {B} requests; full width"))
            self.g_histogram[G] += 1
            return G
        cap = self._cap_sum(max_lens, B)
        why = self._uncovered(bcap, kv_len)
        if why is not None:
            d = BudgetDecision(full_width_rows(B, self.width, self.target_buckets[bcap]), {}, why)
        else:
            d = self._budget(B, bcap, cap, kv_len, token_value) if self.lagged or self.prior_rate is not None \
                else budget_from_lagged([], B, bcap, self.cost_ms, self.target_buckets, width=self.width,
                                        max_candidates=cap)
        self.decisions.append(VerifyDecision(round_id, B, bcap, "async", d.G, d.reason,
                                             d.predicted.get(0 if d.reason.startswith("plain") else d.G)))
        if budget_drafts(d.reason, d.G, B):
            self.g_histogram[d.G] += 1  # rounds that skip the draft (the plain floor) choose no G
        return d.G

    def predicts_gain(self, B: int, round_id: int | None = None, max_lens=None, kv_len: int | None = None,
                      token_value: float = 1.0) -> bool:
        """Synchronous mode's draft gate (adaptive/floor.py): False when the lagged rounds (before any
        are visible: the prior) predict that the early-stopping admission will add no row that pays
        (sync_gain_from_lagged; in async mode: that no budget above B rows pays), so the round should
        skip the draft; True otherwise (no request bucket, outside the calibrated coverage, no feedback
        with prior_rate None: draft and admit as R-D3a says)."""
        self._take_feedback(round_id)
        self._reprice()
        bcap = self.pad_requests(B)
        if (not self.lagged and self.prior_rate is None) or bcap is None or bcap not in self.target_buckets \
                or self._uncovered(bcap, kv_len):
            return True
        cap = self._cap_sum(max_lens, B)
        if self.mode == "sync":  # predict what the early stop will admit, not the best budget (sync_gain_from_lagged)
            reason = self._budget(B, bcap, cap, kv_len, token_value, early_stop=True).reason
            return (reason.startswith(("early stop", "fallback")) or self._window_gains(B, bcap, cap, kv_len, token_value)
                    or (token_value >= 1.0 and cap != 0 and self.served is not None  # cap 0: nothing to verify
                        and (self.served.realised_gain(bcap, B) or self.served.cold_draft(bcap, B))))
        d = self._budget(B, bcap, cap, kv_len, token_value)
        return budget_drafts(d.reason, d.G, B)

    def _cap_sum(self, max_lens, B: int) -> int | None:
        """Drafts the batch can verify at most (verify_budget.cap_list summed)."""
        return None if max_lens is None else sum(cap_list(max_lens, B, self.width))

    def _take_feedback(self, round_id: int | None) -> None:
        new = [(P, counts) for P, counts in self.feedback.release(round_id) if P]
        if new:
            self.lagged.extend(P for P, _ in new)
            self._memo.clear()  # the estimate changed
            if self.mode == "sync":
                for P, counts in new:
                    if counts is not None and self.confidence is not None:
                        self.confidence.push(counts)
                    self.recent.append((P, {}))
                held = sum(len(p) for p, _ in self.recent)
                while len(self.recent) > 1 and held - len(self.recent[0][0]) >= GATE_REQUESTS:
                    held -= len(self.recent.popleft()[0])

    def confidence_ratio(self) -> float:
        """The stream's realised / predicted accepted drafts (draft_calibration.py) in steps of 0.05 (the gate's
        window keeps each round's outcome while it holds); 1 in async mode."""
        return round(20.0 * self.confidence.ratio()) / 20.0 if self.confidence is not None else 1.0

    def _window_gains(self, B: int, bcap: int, cap: int | None, kv_len: int | None, token_value: float) -> bool:
        """The sync gate's second opinion: whether drafting pays on average over the newest rounds holding
        GATE_REQUESTS request-rounds, each admitted by its own early stop (the sum of their expected tokens over
        the sum of their drafted rounds' costs, against a plain round). The newest round alone keeps a stream
        plain after one unconfident round until the next probe; averaging the path probabilities first would
        under-rate an admission that adapts to every round."""
        plain = self._plain(bcap, kv_len)
        if len(self.recent) < 2 or not plain:
            return False
        key = (B, bcap, cap, token_value, "window")
        if key not in self._memo:
            r, admitted, tokens, cost = self.confidence_ratio(), 0, 0.0, 0.0
            own = (r, B, bcap, cap, token_value)
            for P, outcomes in self.recent:
                if own not in outcomes:  # each round's outcome once per ratio and batch (the controller runs every round)
                    if len(outcomes) > 8:
                        outcomes.clear()
                    outcomes[own] = sync_outcome([scaled_rows(P, r)], B, bcap, self.cost_ms, self.pad_rows,
                                                 width=self.width, max_candidates=cap, token_value=token_value)
                out = outcomes[own]
                if out is None:
                    return False
                admitted, tokens, cost = admitted + out[0], tokens + out[1], cost + out[2]
            gains = admitted > 0 and tokens / cost > B / plain  # a draft nothing is admitted from never gains
            self._memo[key] = BudgetDecision(B, {0: tokens / cost}, "window gains" if gains else "plain")
        return self._memo[key].reason == "window gains"

    def _budget(self, B: int, bcap: int, cap: int | None, kv_len: int | None, token_value: float = 1.0,
                early_stop: bool = False) -> BudgetDecision:
        """budget_from_lagged (or, `early_stop`, sync_gain_from_lagged), memoised until new feedback
        arrives (a pure function of its inputs; the plain cost depends on kv_len only through coverage,
        which the caller has checked)."""
        key = (B, bcap, cap, token_value, early_stop)
        d = self._memo.get(key)
        if d is None:
            cold = not self.lagged
            r = self.confidence_ratio()
            lagged = [scaled_rows(P, r) for P in self.lagged] if not cold \
                else [[[self.prior_rate ** j for j in range(1, self.width + 1)] for _ in range(B)]]
            if early_stop:
                d = sync_gain_from_lagged(lagged, B, bcap, self.cost_ms, self.pad_rows, width=self.width,
                                          max_candidates=cap, plain_cost=self._plain(bcap, kv_len),
                                          token_value=token_value)
            else:
                d = budget_from_lagged(lagged, B, bcap, self.cost_ms, self.target_buckets,
                                       width=self.width, max_candidates=cap, plain_cost=self._plain(bcap, kv_len),
                                       token_value=token_value)
            if cold:
                d = dataclasses.replace(d, reason=f"{d.reason} (cold start: prior rate {self.prior_rate:g})")
            if len(self._memo) > 256:
                self._memo.clear()
            self._memo[key] = d
        return d

    def _plain(self, bcap: int, kv_len: int | None) -> float | None:
        return self.plain_ms(bcap, kv_len) if self.plain_ms is not None else None

    def allocate(self, P: torch.Tensor, G: int, max_lens: torch.Tensor | None = None) -> torch.Tensor:
        """Device-side: verify lengths [B] inside budget G (no host sync)."""
        return allocate_in_budget(P, G, max_lens)

    def admit(self, P, round_id: int | None = None, max_lens=None, kv_len: int | None = None,
              token_value: float = 1.0) -> list[int]:
        """Synchronous mode: Algorithm 1 with early stop on the current round's P (host)."""
        B = int(P.shape[0])
        bcap = self.pad_requests(B)
        self._reprice()
        why = "fallback: no request bucket; full width" if bcap is None else self._uncovered(bcap, kv_len)
        if why is not None:
            lens = cap_list(max_lens, B, self.width)
            G = None if bcap is None else self.pad_rows(bcap, B + sum(lens))
            self.decisions.append(VerifyDecision(round_id, B, bcap, "sync", G, why))
            if G is not None:
                self.g_histogram[G] += 1
            return lens
        paths = scaled_rows(clean_rows(P), self.confidence_ratio())  # host lists (host_paths.py)
        d = sync_admission(paths, bcap, self.cost_ms, self.pad_rows, max_lens, token_value)
        self.decisions.append(VerifyDecision(round_id, B, bcap, "sync", d.G, d.reason, d.predicted))
        if d.G is not None:
            self.g_histogram[d.G] += 1
        return d.verify_lens
