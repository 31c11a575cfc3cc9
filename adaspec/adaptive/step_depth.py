"""What a round with ceiling k costs under the confidence stop (adaspec's extension, `ceiling_pricing`, default off;
a mixin of DraftStepController, step_controller.py).

With the confidence stop (step_policy.py, `confidence_stop`) the controller's k is a ceiling: each request drafts
and verifies up to the first step whose path probability falls below the threshold, and the draft stops once every
request has ended. R-C1's score prices a ceiling-k round as if every request drafted and verified k: the table's
full-depth cost, and acceptance per position among the drafts that reached it. Both are the wrong round. Measured on
the Zen 4 VM at code B = 1 (stop 49): a k = 2 round that stopped at step 1 cost 20.3 ms, one at step 2 25.0 ms, the
table's k = 2 ~25 ms; and on the mixed stream at B = 1 (k_max 5) the draft step *forced* to ceiling 5 ran ~1% above
the controller in the same interleaved runs (stop 50): deep ceilings paid more than the score said.

So, with the rounds' ceilings reported (`observe(..., ceilings=...)`: per request, the most it could verify, min(k,
what its max_tokens left)):
- **acceptance per position** counts a draft that stopped short of its ceiling with every verified token accepted
  as reaching the next position and not getting it (feedback.AcceptanceWindow.observe): a_i becomes the chance that
  a round of ceiling >= i yields token i, the stop included, which is what ceiling k earns;
- **the cost of ceiling k** (`_ceiling_priced`) is the table's, each deeper step weighted by the chance that the
  round's draft reaches it: cost(k) = c(1) + sum_{i=2..k} P(D >= i) (c(i) - c(i-1)), where D, the deepest request's
  stop, has P(D >= i) = 1 - (1 - p_i)^B and p_i = prod_{j<i} q_j, q_j the window's rate of drafts that went on past
  step j among those whose ceiling allowed it (`StopDepth`). A step never measured carries the deepest measured
  rate forward (as feedback.py carries acceptance); with none measured, q = 1: the table's full depth, as without
  this rule. k = 0 and k = 1 (every request drafts step 1) are priced as before, so the plain floor, the served price
  (step_served.py) and the cost checks read the same numbers.

The continuation rates are refreshed at each re-score (every update_interval completed batches), so between re-scores
the priced table is the same object (a new one re-scores at once: step_controller.py). Pooled over the window's
requests: the verify rows of a batch whose requests stop at different depths are priced at the deepest one's (an
upper bound). Nothing here changes what a round verifies beyond choosing k, so it is lossless as every k is.

Measured (BENCHMARKS.md stop 50, interleaved on one shared start-up table): no better than full-depth pricing on the
mixed stream at B = 1 (median of 14 repeats 1.002x) and 1.4% slower on code at B = 1, T = 0.8, where it chose ceiling 3
while a fixed k = 1 paid. What it lacks: at ceiling 1 the window holds no draft past step 1, so the next position
carries step 1's rate (unconfident drafts included) and the stop rates are unknown; remembering older rates instead
(tried) never re-measures them and held k at 1. Hence off by default.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence


class StopDepth:
    """Per step i, of the drafts whose ceiling allowed step i + 1 and that reached step i, how many went on
    (the window's last `window_size` batches with drafts, as feedback.AcceptanceWindow)."""

    def __init__(self, max_steps: int, window_size: int):
        self.max_steps, self.window_size = max_steps, window_size
        self._batches: deque[tuple[list[int], list[int]]] = deque()
        self._risk = [0] * max_steps  # index i-1: drafts that reached step i with a ceiling above i
        self._went_on = [0] * max_steps  # ... and went on to step i + 1

    def observe(self, verify_lens: Sequence[int], ceilings: Sequence[int]) -> None:
        risk, went_on = [0] * self.max_steps, [0] * self.max_steps
        drafts = 0
        for L, c in zip(verify_lens, ceilings):
            L, c = int(L), int(c)
            if L <= 0:
                continue
            drafts += 1
            for i in range(1, min(L + 1, c)):  # steps i < ceiling that the draft reached: at risk of stopping there
                risk[i - 1] += 1
                if L > i:
                    went_on[i - 1] += 1
        if not drafts:
            return
        self._batches.append((risk, went_on))
        self._add(risk, went_on, 1)
        if len(self._batches) > self.window_size:
            self._add(*self._batches.popleft(), -1)

    def _add(self, risk, went_on, sign: int) -> None:
        for i in range(self.max_steps):
            self._risk[i] += sign * risk[i]
            self._went_on[i] += sign * went_on[i]

    def continuation(self) -> tuple[float, ...]:
        """q_i, i = 1..max_steps - 1: the chance a draft at step i goes on to i + 1 (carried forward past the deepest
        measured step; 1.0 before any)."""
        out, last = [], 1.0
        for risk, went_on in zip(self._risk[:-1], self._went_on[:-1]):
            if risk > 0:
                last = went_on / risk
            out.append(last)
        return tuple(out)


def reach(continuation: Sequence[float], batch_size: int) -> list[float]:
    """P(D >= i), i = 1..len(continuation) + 1: the chance that the deepest of `batch_size` independent requests'
    drafts reaches step i."""
    out, p = [1.0], 1.0
    for q in continuation:
        p *= q
        out.append(1.0 - (1.0 - p) ** batch_size)
    return out


def ceiling_table(table: dict[int, float], reached: Sequence[float]) -> dict[int, float]:
    """`table` ({k: full-depth ms}) with each k >= 2 priced at its expected depth (module docstring)."""
    out = dict(table)
    for k in sorted(j for j in table if j >= 2):
        if k - 1 in table and k - 1 < len(reached):
            out[k] = out[k - 1] + reached[k - 1] * (table[k] - table[k - 1])
    return out


class CeilingPricing:
    """The draft step controller's ceiling pricing (sets `depth`); needs the controller's `policy`."""

    def _init_depth(self, max_steps: int) -> None:
        self.depth = StopDepth(max_steps, self.policy.window_size)
        self._ceilings_seen = False  # observe() was given ceilings: the engine applies a confidence stop
        self._continuation: tuple[float, ...] | None = None  # refreshed at re-scores
        self._ceiling_cache: dict[tuple, tuple] = {}  # (request count, id(table)) -> (table, priced)

    def _refresh_depth(self) -> None:
        """Take the window's continuation rates (at a re-score: the priced table changes only then)."""
        if self._ceilings_seen and self.policy.ceiling_pricing:
            cont = self.depth.continuation()
            if cont != self._continuation:
                self._continuation, self._ceiling_cache = cont, {}

    def _ceiling_priced(self, batch_size: int, table: dict[int, float]) -> dict[int, float]:
        """`table` priced at the expected depth for `batch_size` requests, or `table` itself while no ceilings are
        reported; the same object while the table and the rates are (the controller re-scores on a new one)."""
        if self._continuation is None or not self.policy.ceiling_pricing:
            return table
        key = (batch_size, id(table))
        cached = self._ceiling_cache.get(key)
        if cached is not None and cached[0] is table:
            return cached[1]
        if len(self._ceiling_cache) > 64:  # tables of request counts long gone
            self._ceiling_cache.clear()
        priced = ceiling_table(table, reach(self._continuation, batch_size))
        self._ceiling_cache[key] = (table, priced)
        return priced

    def describe_depth(self) -> str:
        if not self.policy.ceiling_pricing:
            return "[adaspec] ceiling pricing: off (policy.ceiling_pricing); a ceiling k is priced at full depth"
        return ("[adaspec] ceiling pricing: with the confidence stop, a ceiling k >= 2 is priced at the depth its "
                "drafts reach (the window's rate of drafts going on past each step), and a draft that stopped short "
                "counts as missing the next position")
