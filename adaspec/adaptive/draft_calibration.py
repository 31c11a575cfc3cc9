"""The stream's correction of the draft's confidences (issue 13; adaspec's extension of R-D3a, sync verify).

DSpark's confidence head is calibrated offline (STS) on the training mixture; on a given stream it is off by
a factor. Measured at full width, B = 1 (mean predicted / realised accepted drafts per round, BENCHMARKS.md
stop 59): code 0.57 / 0.54, chat 0.51 / 0.44, prose 1.71 / 2.10. An underconfident head keeps the synchronous
gate plain where drafting pays (prose), an overconfident one admits rows that do not (chat).

`ConfidenceRatio` keeps, over the newest completed rounds (lagged, as all feedback), the drafted tokens a round
accepted against the number its path probabilities predicted for the positions it verified (sum over verified
positions j of P_j = E[accepted | verified]), and returns their ratio r, shrunk towards 1 by
`PRIOR_TOKENS` predicted tokens and clipped to [`MIN_RATIO`, `MAX_RATIO`]. `host_paths.scaled_rows(P, r)` is
min(1, r * P), still non-increasing along a request's path. What a round admits is the only thing it changes, so outputs stay the
target's (every admission is lossless, R-D3a).
"""

from __future__ import annotations

from collections import deque

import numpy as np

WINDOW_REQUESTS = 64  # newest request-rounds the ratio is taken over
PRIOR_TOKENS = 4.0  # predicted tokens of pseudo-evidence at ratio 1
MIN_RATIO, MAX_RATIO = 0.5, 2.0


class ConfidenceRatio:
    def __init__(self, window_requests: int = WINDOW_REQUESTS, prior_tokens: float = PRIOR_TOKENS):
        if window_requests < 1 or prior_tokens < 0:
            raise ValueError(f"window_requests must be >= 1 and prior_tokens >= 0, got {window_requests}, "
                             f"{prior_tokens}")
        self.window_requests, self.prior_tokens = window_requests, prior_tokens
        self._rounds: deque[tuple[int, float, float]] = deque()  # (requests, predicted, realised)
        self._requests, self._predicted, self._realised = 0, 0.0, 0.0  # sums over the window

    @staticmethod
    def counts(P: np.ndarray, verify_lens, accepted) -> tuple[int, float, float]:
        """(requests, predicted, realised) of one round: P [B, w] path probabilities (an array or rows of floats),
        the verified and accepted draft tokens per request."""
        rows = P.tolist() if isinstance(P, np.ndarray) else P
        w = len(rows[0]) if len(rows) else 0
        lens = [min(int(L), w) for L in verify_lens]
        predicted = sum(sum(row[:L]) for row, L in zip(rows, lens))  # plain Python: a round has a few dozen
        return len(rows), float(predicted), float(sum(min(int(m), L) for m, L in zip(accepted, lens)))

    def push(self, counts: tuple[int, float, float]) -> None:
        if counts[0] <= 0:
            return
        self._rounds.append(counts)
        self._add(counts, 1)
        while len(self._rounds) > 1 and self._requests - self._rounds[0][0] >= self.window_requests:
            self._add(self._rounds.popleft(), -1)
        if len(self._rounds) == 1:  # re-anchor the running sums (no drift over a long run)
            self._requests, self._predicted, self._realised = self._rounds[0]

    def _add(self, counts: tuple[int, float, float], sign: int) -> None:
        self._requests += sign * counts[0]
        self._predicted += sign * counts[1]
        self._realised += sign * counts[2]

    def ratio(self) -> float:
        predicted, realised = max(self._predicted, 0.0), max(self._realised, 0.0)
        r = (realised + self.prior_tokens) / (predicted + self.prior_tokens) if predicted + self.prior_tokens > 0 else 1.0
        return min(MAX_RATIO, max(MIN_RATIO, r))

