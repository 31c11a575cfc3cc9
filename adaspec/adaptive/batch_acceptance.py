"""The acceptance of the batch being planned, from its own requests' drafts (adaspec's extension, issue 13).

A round with k draft steps yields, per request r, 1 + sum_i a_{r,i} tokens (a_{r,i}: r's prefix acceptance
at position i), so the batch's expected tokens per request are the *mean over its requests* of their
prefix acceptances. The window's pooled counts (feedback.AcceptanceWindow, whose Kaplan-Meier product
already weighs each position by who reached it) give that mean for the requests *that drafted in the
window*, in the proportions they drafted, and those need not be the batch being planned: the window
holds drafts of requests that have left, and none of requests that just joined. On the staggered stream
(requests join and leave every few seconds) a code request accepting 93% of its drafts joined two chat
requests at 25-40%; the window, full of the chat requests' drafts, kept the batch of three at k = 0 for
~110 batches while a fixed k = 1 paid ~8% there (bench/round_kinds.py --source=staggered --by_batch,
BENCHMARKS.md stop 42); when the chat requests left, their drafts stayed in the window.

Estimator. Per request r in the batch and draft position i, its conditional rate is shrunk towards the
window's pooled rate p_i (every request's drafts, the Kaplan-Meier rates of feedback.AcceptanceWindow):

    alpha_{r,i} = (n_{r,i} + s p_i) / (r_{r,i} + s),     s = SHRINK_DRAFTS

(n, r: r's accepted and reached counts at position i in the window). A request with no draft in the
window (it just joined, or only ever ran at k = 0) is priced at the pooled rate, one with many drafts
at its own.

The population (adaspec's extension, `policy.population_drafts`): with it > 0, p_i is instead the rate of
the latest window batches' drafts *and those before them*, of every request, back to at least
population_drafts drafts (feedback.AcceptanceWindow.shrink_target), and it is never aged. The window says
what the batch's requests did lately; p_i says what a request does before its own drafts speak. At one
request the window holds nothing but the previous request's last window_size drafts: on the mixed stream
at B = 1 one request's final 30 tokens accepted next to nothing, the controller went plain, and the next
request, priced at those drafts, started plain for 77 tokens where speculating ran 6.6% faster
(bench/results/s53). With the population its first drafts are priced at what requests have accepted over
the last few hundred, and a request whose own evidence ages at k = 0 (step_explore.py) reverts towards it,
not towards the stretch that sent it there.

The batch's prefix acceptance is the mean over its requests of cumprod_i alpha_{r,i}. With a
confidence bound (`z` > 0, the step controller's optimistic and backoff rules), each request's rate is
the Wilson upper bound of its shrunk counts at z / sqrt(B): the mean of B independent estimates has
1 / sqrt(B) of their standard error, so the batch's estimate moves z of *its* standard errors, as the
pooled bound does. Aging (the controller at k = 0) weights each window batch's counts, pooled and
per request alike (not the population's: it is what the aged evidence reverts to).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable, Hashable, Iterable, Sequence

import numpy as np

# the per-request estimate's prior strength, in drafts: a request with this many drafts in the window is
# priced half at its own rate, half at the window's pooled rate (a window of 20 batches gives a request
# that drafted in each 20 drafts, ~83% its own)
SHRINK_DRAFTS = 4.0


class RequestCounts:
    """Per-request accepted / reached counts over the window's batches (kept as running sums, so the
    unaged estimate costs O(B) per call): per request two lists of floats (whole numbers), updated with
    Python additions (a round's hot path; AcceptanceWindow.observe)."""

    def __init__(self, max_steps: int):
        self.max_steps = max_steps
        self.sums: dict[Hashable, list[list[float]]] = {}  # request -> [accepted, reached] per position

    def add(self, per_draft: Sequence[tuple], sign: int) -> None:
        """per_draft: (request, accepted m, reached r) per draft; position i counts for accepted when
        i < m and for reached when i < r (0-based); sign +1 enters the window, -1 leaves it."""
        for rid, m, r in per_draft:
            _, reach = add_draft(self.sums, rid, m, r, sign, self.max_steps)
            if sign < 0 and not any(reach):
                del self.sums[rid]  # no draft of it left in the window


class Population:
    """The population's counts (module docstring): the latest batches with drafts, dropping the oldest while the rest
    still hold `min_drafts` drafts; per position, accepted and reached summed over them (Python ints, a round's hot
    path, as RequestCounts)."""

    def __init__(self, max_steps: int, min_drafts: int):
        self.min_drafts = min_drafts
        self._batches: deque[tuple] = deque()
        self.accepted, self.reached = [0] * max_steps, [0] * max_steps
        self.drafts = 0
        self.version = 0  # batches added so far (what a reader's memo of the rates is keyed on)

    def add(self, accepted: Sequence[int], reached: Sequence[int], drafts: int) -> None:
        """A batch's per-position accepted and reached counts and its number of drafts."""
        self._batches.append((accepted, reached, drafts))
        self.version += 1
        self._sum(accepted, reached, drafts, 1)
        while self.drafts - self._batches[0][2] >= self.min_drafts:
            self._sum(*self._batches.popleft(), -1)

    @property
    def batches(self) -> int:
        return len(self._batches)

    def _sum(self, accepted, reached, drafts: int, sign: int) -> None:
        self.drafts += sign * drafts
        for i, (a, r) in enumerate(zip(accepted, reached)):
            self.accepted[i] += sign * a
            self.reached[i] += sign * r


def aged_counts(entries: Iterable[tuple[float, Sequence[tuple]]], batch: set,
                max_steps: int) -> dict[Hashable, list[list[float]]]:
    """Per-request weighted counts of the batch's requests over (weight, per-draft records) entries; a record is
    (request, accepted m, reached r): the weight counts for the first m, resp. r, positions."""
    # Python floats, not a numpy slice update per draft: the controller ages the window every few batches at k = 0,
    # with the caches cold after the target's forward, and two numpy calls per draft were most of its re-score
    # (the same additions in the same order: the same bits)
    out: dict[Hashable, list[list[float]]] = {}
    for w, per_draft in entries:
        for rid, m, r in per_draft:
            if rid in batch:
                add_draft(out, rid, m, r, w, max_steps)
    return out


def add_draft(sums: dict, rid: Hashable, m: int, r: int, x: float, max_steps: int) -> list[list[float]]:
    """Add x to request `rid`'s first m accepted and first r reached positions in `sums` (request -> [accepted,
    reached], created at zero), in Python floats; its pair."""
    s = sums.get(rid)
    if s is None:
        s = sums[rid] = [[0.0] * max_steps, [0.0] * max_steps]
    acc, reach = s
    for i in range(m):
        acc[i] += x
    for i in range(r):
        reach[i] += x
    return s


def batch_prefix_acceptance(batch: Sequence[Hashable], counts: Callable[[Hashable], "list[np.ndarray] | None"],
                            pooled_rates: np.ndarray, z: float = 0.0, shrink: float = SHRINK_DRAFTS) -> np.ndarray:
    """Mean over `batch` of each request's prefix acceptance (module docstring); `counts(rid)`: its
    [accepted, reached] arrays in the window (None: no draft), `pooled_rates`: the window's conditional rates
    (positions never reached already carried forward)."""
    return request_prefix_acceptance(batch, counts, pooled_rates, z, shrink).mean(axis=0)


def request_prefix_acceptance(batch: Sequence[Hashable], counts: Callable[[Hashable], "Sequence | None"],
                              pooled_rates: Sequence[float], z: float = 0.0,
                              shrink: float = SHRINK_DRAFTS) -> np.ndarray:
    """Each request's shrunk prefix acceptance ([len(batch), positions], batch order; arguments as
    batch_prefix_acceptance's, whose mean over the rows it is). In Python floats, wilson_upper_array's formula through
    wilson_upper, element for element (the same bits: a test holds them to the numpy form): a handful of requests and
    positions, read at every re-score with the caches cold after the target's forward, where a dozen numpy calls
    cost more than the arithmetic."""
    if not batch:
        raise ValueError("batch_prefix_acceptance needs at least one request")
    zb = z / math.sqrt(len(batch)) if z > 0 else 0.0
    prior = [shrink * float(p) for p in pooled_rates]
    trials0 = float(shrink)
    rows = []
    for rid in batch:
        c = counts(rid)
        row, path = [], 1.0
        for i, s in enumerate(prior):
            if c is None:
                rate = wilson_upper(s, trials0, zb)
            else:
                rate = wilson_upper(s + float(c[0][i]), trials0 + float(c[1][i]), zb)
            path = rate if i == 0 else path * rate  # cumprod: its first element is the rate itself
            row.append(path)
        rows.append(row)
    return np.array(rows, dtype=np.float64)


def wilson_upper(successes: float, trials: float, z: float) -> float:
    """Upper end of the Wilson score interval of a binomial rate (`z` = 0: the plain ratio).
    Counts may be fractional (down-weighted evidence). wilson_upper_array's formula on Python
    floats, operation for operation: the same bits (a test holds them equal)."""
    if not trials > 0:
        raise ValueError(f"trials must be > 0, got {trials}")
    p = successes / trials
    if z <= 0.0:
        return p
    z2n = z * z / trials
    half = z * math.sqrt(max(p * (1.0 - p), 0.0) / trials + z2n / (4.0 * trials))
    return min(1.0, (p + z2n / 2.0 + half) / (1.0 + z2n))


def wilson_upper_array(successes: np.ndarray, trials: np.ndarray, z: float) -> np.ndarray:
    """Upper ends of the Wilson score intervals of binomial rates, elementwise (trials > 0; `z` = 0: the plain
    ratios; counts may be fractional); wilson_upper is its scalar form."""
    p = successes / trials
    if z <= 0.0:
        return p
    z2n = z * z / trials
    half = z * np.sqrt(np.maximum(p * (1.0 - p), 0.0) / trials + z2n / (4.0 * trials))
    return np.minimum(1.0, (p + z2n / 2.0 + half) / (1.0 + z2n))
