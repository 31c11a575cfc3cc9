"""Online acceptance estimate of the Suffix draft's tokens (issue 10; the predictor of R-D2).

A Suffix proposal is the continuation of the longest earlier n-gram that ends the context. Its
draft token j (1-based) gets the score

    s_j = P(token j accepted | tokens 1..j-1 accepted, match length n, match frequency f, j)

the same *conditional* predictor as DSpark's confidence head and MTP's draft probability, so path
probabilities (adaptive/scoring.py) are prod_{i <= j} s_i. Features are bucketed: n in
{2, 3, 4-5, 6-7, 8+} (8 = the longest n-gram indexed), f = earlier occurrences of the n-gram in
{1, 2-3, 4+}, j in 1..16.

Estimate per cell: (accepted + S * prior(n)) / (reached + S), a Beta-binomial mean with S = 4
pseudo-observations. The **stated prior** prior(n) = 0.40, 0.50, 0.60, 0.70, 0.75 for the five
length buckets (NOTES.md: a 2-gram lookup on SmolLM2 code was right 78% of the time; chat repeats
far less, so the prior sits below that, and the counts take over after a few rounds). A draft that
verified L tokens and accepted m of them *reached* positions 1..min(L, m + 1) and was accepted at
1..m; positions it did not verify teach nothing.

Lag (R-C4, like adaptive/feedback.py): `push(round_id, records)` when the engine hands over a
completed round; `release(round_id)` when round n is drafted applies exactly the rounds <= n - lag.
The estimate used for round n never depends on round n's own (or, with schedule overlap, round
n - 1's) outcome. Push and release may run on different threads (schedule overlap): one lock.
"""

from __future__ import annotations

import threading

import numpy as np

from ..adaptive.feedback import LaggedFeedback

LEN_BUCKETS = (2, 3, 4, 6, 8)  # lower edges: n=2 | 3 | 4-5 | 6-7 | 8+
FREQ_BUCKETS = (1, 2, 4)  # 1 | 2-3 | 4+
MAX_POSITIONS = 16
PRIOR_BY_LENGTH = (0.40, 0.50, 0.60, 0.70, 0.75)
PRIOR_STRENGTH = 4.0


def _bucket(x: int, edges) -> int:
    b = 0
    for i, e in enumerate(edges):
        if x >= e:
            b = i
    return b


class SuffixScores:
    def __init__(self, lag: int = 1, prior=PRIOR_BY_LENGTH, strength: float = PRIOR_STRENGTH):
        shape = (len(LEN_BUCKETS), len(FREQ_BUCKETS), MAX_POSITIONS)
        self.accepted = np.zeros(shape)
        self.reached = np.zeros(shape)
        self.prior = np.broadcast_to(np.asarray(prior, dtype=np.float64)[:, None, None], shape).copy()
        self.strength = float(strength)
        self.feedback: LaggedFeedback[list] = LaggedFeedback(lag)
        self._lock = threading.Lock()
        self.rounds_applied = 0

    def set_lag(self, lag: int) -> None:
        with self._lock:
            self.feedback.lag = int(lag)

    @staticmethod
    def cell(n: int, freq: int) -> tuple[int, int]:
        return _bucket(n, LEN_BUCKETS), _bucket(freq, FREQ_BUCKETS)

    def scores(self, n: int, freq: int, k: int) -> list[float]:
        """s_1..s_k of a proposal from a match of length n seen `freq` times before."""
        a, f = self.cell(n, freq)
        j = np.minimum(np.arange(k), MAX_POSITIONS - 1)
        s = (self.accepted[a, f, j] + self.strength * self.prior[a, f, j]) / (self.reached[a, f, j] + self.strength)
        return s.tolist()

    # ---- feedback ----------------------------------------------------------------------------
    def push(self, round_id, records: list[tuple[int, int, int, int]]) -> None:
        """records: (n, freq, verified L, accepted m) of every Suffix proposal of a completed round."""
        if records:
            with self._lock:
                self.feedback.push(round_id, records)

    def release(self, round_id) -> None:
        """Apply every completed round visible when drafting `round_id` (rounds <= round_id - lag)."""
        with self._lock:
            batches = self.feedback.release(round_id)
        for records in batches:
            self.rounds_applied += 1
            for n, freq, L, m in records:
                a, f = self.cell(n, freq)
                reach = min(L, m + 1, MAX_POSITIONS)
                if reach <= 0:
                    continue
                self.reached[a, f, :reach] += 1
                self.accepted[a, f, :min(m, MAX_POSITIONS)] += 1
