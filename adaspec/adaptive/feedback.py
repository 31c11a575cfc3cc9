"""Acceptance feedback for the adaptive controllers: completed rounds only, lag explicit (R-C2, R-C4).

Vocabulary (PRIOR_ART.md §5.1). A *draft* is one request in one completed round that verified
L >= 1 draft tokens and accepted m <= L of them (L = 0 is no draft and carries no information).
Positions are 1-based in the text and 0-based in arrays: array index i is draft position i + 1.
- n_i: drafts with m >= i (position i survived); v_i: drafts with L >= i (position i verified).
- survival / prefix acceptance a_i = P(first i drafts all accepted).
- conditional rate alpha_i = P(position i accepted | positions 1..i-1 accepted).

Estimator. alpha_i = n_i / r_i, with r_i = drafts that verified position i *and* reached it
(L >= i and m >= i - 1), and a_i = prod_{j <= i} alpha_j (the Kaplan-Meier product). When every
draft of the window verified at least i positions (the step controller's normal case: one k per
batch) this telescopes to exactly n_i / v_i, the ratio of `metrics.spec_stats`. When verify
lengths differ inside the window (a k switch, a request capped by max_tokens), the product still
uses every verified position and stays non-increasing in i, whereas n_i / v_i can rise with i.

Positions never reached in the window (r_i = 0). If position i - 1 was measured with survival 0,
a_i = 0 whatever alpha_i is. Otherwise no draft in the window verified position i (k was smaller):
the deepest measured conditional rate is carried forward, alpha_i = alpha_last. This uses nothing
from outside the window, keeps a non-increasing, geometric tail, and lets the step controller
grow k again when the measured rates are high; if deeper positions are in truth worse, the
longer k is measured within `update_interval` batches and the min-gain rule damps oscillation.

Cold start (no draft in the window): alpha_i = `prior_rate` for every position (default 0.5,
a_i = 0.5^i). The step controller does not re-score on the prior alone (it keeps its start k);
the prior is what `prefix_acceptance()` reports until feedback exists.

Window: the last `window_size` completed batches *that carried at least one draft*. A batch with
no draft (a k = 0 round, every request at L = 0) counts in `completed` but does not enter the
window: it holds no acceptance information, and letting it push measured batches out would decay
the estimate to the prior merely because speculation was paused.

The batch's own requests (adaspec's extension): with request ids given to `observe`, and the batch
being planned set in `batch`, every estimate below is the mean over the batch's requests of their own
prefix acceptance, each shrunk towards the pooled rates above, or with `population_drafts` > 0 towards the
population's (the latest drafts of every request, at least that many; batch_acceptance.py); without ids, or
with `batch` None, the pooled estimate.

Lag. The controller planning round n may only use results of rounds <= n - lag: lag 1 when the
engine is synchronous (round n-1 finished before n is planned), 2 with schedule overlap (round
n-1 is still running while n is planned). `LaggedFeedback` holds results tagged with their round
id and releases only the visible ones, so the rule is enforced by code, not by call order.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Any, Generic, Hashable, Sequence, TypeVar

import numpy as np

from .batch_acceptance import (Population, RequestCounts, aged_counts, batch_prefix_acceptance,
                               request_prefix_acceptance, wilson_upper)

T = TypeVar("T")

DEFAULT_PRIOR_RATE = 0.5


class AcceptanceWindow:
    """Windowed per-position prefix acceptance from completed batches (R-C2)."""

    def __init__(self, max_steps: int, window_size: int, prior_rate: float = DEFAULT_PRIOR_RATE,
                 population_drafts: int = 0):
        if population_drafts < 0:
            raise ValueError(f"population_drafts must be >= 0 (0 = the window's pooled rates), got {population_drafts}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if window_size < 1:
            raise ValueError(f"window_size must be >= 1, got {window_size}")
        if not 0.0 <= prior_rate <= 1.0:
            raise ValueError(f"prior_rate must be in [0, 1], got {prior_rate}")
        self.max_steps, self.window_size, self.prior_rate = max_steps, window_size, prior_rate
        self.completed = 0  # completed batches observed (with or without drafts)
        # per batch: n_i, r_i, v_i, drafts, `completed` when it was observed (its age, `aged_*`), and per draft
        # (request, accepted, reached) when observe() was given request ids (else None)
        self._batches: deque[tuple] = deque()
        self.requests = RequestCounts(max_steps)  # per-request sums over the window (batch_acceptance.py)
        self._anonymous = 0  # window batches observed without request ids
        self.batch: tuple[Hashable, ...] | None = None  # the batch being planned (None: pooled estimates)
        # n_i, r_i, v_i summed over the window: Python ints (a round's bookkeeping is a few additions; as numpy
        # arrays it was a dozen tiny array operations per round, each paying numpy's dispatch with the caches
        # cold after the target's forward), read as arrays only by the estimates
        self._accepted = [0] * max_steps
        self._reached = [0] * max_steps
        self._verified = [0] * max_steps
        self._drafts = 0
        # the per-request point estimate of `batch` ((counts version, batch), [requests, positions], its mean):
        # unchanged while no batch with drafts enters or leaves the window and the batch holds the same requests, as
        # through a stretch of k = 0, where a re-score every few batches recomputed it (twice) for nothing
        self._version = 0
        self._per_request: tuple | None = None
        # what a request's own rates are shrunk towards when population_drafts > 0 (batch_acceptance.py)
        self.population = Population(max_steps, population_drafts) if population_drafts else None
        self._population_rates: tuple | None = None  # (version, the population's rates), memoised

    # ---- feeding ------------------------------------------------------------------------
    def observe(self, verify_lens: list[int], num_accepted: list[int],
                requests: Sequence[Hashable] | None = None, ceilings: Sequence[int] | None = None) -> None:
        """One completed batch: per request, verified draft count L and accepted count m (and, optionally,
        the requests' ids, in the same order). `ceilings`: per request, the most it could have verified (the
        draft step's confidence stop, step_depth.py): a draft that accepted all L < ceiling counts as reaching
        position L + 1 and missing it, so a_i is what a round of ceiling >= i yields at position i."""
        if len(verify_lens) != len(num_accepted):
            raise ValueError(f"{len(verify_lens)} verify lengths but {len(num_accepted)} accepted counts")
        if requests is not None and len(requests) != len(verify_lens):
            raise ValueError(f"{len(verify_lens)} verify lengths but {len(requests)} request ids")
        if ceilings is not None and (len(ceilings) != len(verify_lens)
                                     or any(L > c for L, c in zip(verify_lens, ceilings))):
            raise ValueError(f"ceilings {list(ceilings)} do not bound verify lengths {list(verify_lens)}")
        if not any(verify_lens):  # a batch without drafts (k = 0: most batches of the plain floor) only counts
            if any(num_accepted):
                raise ValueError(f"accepted counts {list(num_accepted)} for a batch that verified no draft")
            self.completed += 1
            return
        per_draft = [] if requests is not None else None
        # per position, this batch's n_i, r_i, v_i: counts of drafts with m, r, L above it
        acc, reach, ver = [0] * self.max_steps, [0] * self.max_steps, [0] * self.max_steps
        drafts = 0
        for j, (L, m) in enumerate(zip(verify_lens, num_accepted)):
            L, m = int(L), int(m)
            if not 0 <= m <= L:
                raise ValueError(f"accepted count {m} outside [0, verify length {L}]")
            if L > self.max_steps:
                raise ValueError(f"verify length {L} exceeds max_steps {self.max_steps}")
            if L == 0:
                continue
            drafts += 1
            r = min(L, m + 1)  # positions reached: verified, and every earlier one accepted
            if m == L and ceilings is not None and L < min(int(ceilings[j]), self.max_steps):
                r = L + 1  # stopped short of its ceiling with all accepted: position L + 1 reached, not drafted
            for i in range(m):
                acc[i] += 1
            for i in range(r):
                reach[i] += 1
            for i in range(L):
                ver[i] += 1
            if per_draft is not None:
                per_draft.append((requests[j], m, r))
        self.completed += 1  # after the checks: a rejected batch is not counted
        self._batches.append((acc, reach, ver, drafts, self.completed, per_draft))
        self._count(acc, reach, ver, drafts, per_draft, 1)
        if self.population is not None:
            self.population.add(acc, reach, drafts)
        if len(self._batches) > self.window_size:
            old = self._batches.popleft()
            self._count(*old[:4], old[5], -1)

    def _count(self, acc, reach, ver, drafts, per_draft, sign: int) -> None:
        self._version += 1  # sign is +1 (entering the window) or -1 (leaving it)
        for total, part in ((self._accepted, acc), (self._reached, reach), (self._verified, ver)):
            for i, x in enumerate(part):
                if x:
                    total[i] += sign * x
        self._drafts += sign * drafts
        if per_draft is None:
            self._anonymous += sign
        else:
            self.requests.add(per_draft, sign)

    def shrink_target(self, pooled) -> np.ndarray:
        """The conditional rates a request's own are shrunk towards (batch_acceptance.py): the population's, never
        aged (a statement about requests at large, not evidence about the batch being planned); with
        population_drafts 0, `pooled` (a callable: the window's pooled rates, as the caller weighs them)."""
        if self.population is not None and self.population.drafts:
            if self._population_rates is None or self._population_rates[0] != self.population.version:
                rates = self._rates(self.population.accepted, self.population.reached, 0.0)
                rates.setflags(write=False)
                self._population_rates = (self.population.version, rates)
            return self._population_rates[1]
        return pooled()

    # ---- reading ------------------------------------------------------------------------
    @property
    def has_data(self) -> bool:
        return self._drafts > 0

    @property
    def drafts_in_window(self) -> int:
        return self._drafts

    @property
    def batches_in_window(self) -> int:
        return len(self._batches)

    def conditional_rates(self, z: float = 0.0, weight: float = 1.0) -> np.ndarray:
        """alpha_i per position ([max_steps] float64), unseen positions filled as documented above.
        `z` > 0: each measured rate is replaced by its Wilson upper confidence bound `z` standard
        errors above it (`wilson_upper`), computed as if the window held `weight` times its counts
        (weight < 1: older evidence, a wider bound)."""
        if not self.has_data:
            return np.full(self.max_steps, self.prior_rate)
        w = float(weight)
        return self._rates([a * w for a in self._accepted], [r * w for r in self._reached], z)

    def prefix_acceptance(self, z: float = 0.0, weight: float = 1.0) -> np.ndarray:
        """a_i = P(first i drafts all accepted), i = 1..max_steps ([max_steps] float64, non-increasing);
        `z` > 0: the optimistic product of `conditional_rates(z, weight)`. With `batch` set, and every window
        batch observed with request ids: the mean over the batch's requests (batch_acceptance.py)."""
        if not self._composed():
            return np.cumprod(self.conditional_rates(z, weight))
        if z == 0 and weight == 1:
            self.request_prefix_acceptance()  # the same computation, memoised with its mean
            return self._per_request[2]
        w = float(weight)
        pooled = self.shrink_target(lambda: self.conditional_rates(0.0, w))  # composed: the window has drafts

        def counts(rid):
            c = self.requests.sums.get(rid)
            return None if c is None else [[x * w for x in c[0]], [x * w for x in c[1]]]  # np.multiply's bits
        return batch_prefix_acceptance(self.batch, counts, pooled, z)

    def request_prefix_acceptance(self) -> np.ndarray | None:
        """Each of `batch`'s requests' own (shrunk) prefix acceptance at the point estimate ([len(batch), max_steps],
        batch order; batch_acceptance.py), or None when estimates are not per request."""
        if not self._composed():
            return None
        key = (self._version, self.batch)
        if self._per_request is None or self._per_request[0] != key:
            target = self.shrink_target(self.conditional_rates)
            per = request_prefix_acceptance(self.batch, self.requests.sums.get, target)
            mean = per.mean(axis=0)
            for shared in (per, mean):
                shared.setflags(write=False)  # shared by every caller until the window or the batch changes
            self._per_request = (key, per, mean)
        return self._per_request[1]

    def drafts_of(self, request: Hashable) -> int:
        """Drafts of `request` in the window (0: none, or the window has no request ids)."""
        c = self.requests.sums.get(request)
        return 0 if c is None else int(round(c[1][0]))

    def _composed(self) -> bool:
        """Whether estimates are per request of `batch`: one is set, and the window has drafts, all with ids."""
        return bool(self.batch) and self.has_data and self._anonymous == 0

    def aged_prefix_acceptance(self, z: float, now: int, since: int, half_life: float) -> np.ndarray:
        """`prefix_acceptance(z)` with each batch's counts weighted 2^(-age / half_life), where a batch's
        age is the number of completed batches from max(when it was observed, `since`) to `now`: evidence
        ages only after `since` (the step controller: when k = 0 took effect), and a batch observed later
        (a probe) starts fresh. With no batch observed after `since` this equals
        `prefix_acceptance(z, 2^(-(now - since) / half_life))`."""
        if not half_life > 0:
            raise ValueError(f"half_life must be > 0, got {half_life}")
        if not self.has_data:
            return np.full(self.max_steps, self.prior_rate)
        weights = [0.5 ** (max(0, now - max(b[4], since)) / half_life) for b in self._batches]

        def pooled_rates(z: float) -> np.ndarray:
            # sum over the window's batches of weight x counts, a running sum in window order in Python floats (the
            # bits of the per-batch loop, then of the numpy running sum, that came before); only when read: the
            # per-request estimate with a population never reads it
            accepted, reached = [0.0] * self.max_steps, [0.0] * self.max_steps
            for w, b in zip(weights, self._batches):
                for i, x in enumerate(b[0]):
                    accepted[i] += w * x
                for i, x in enumerate(b[1]):
                    reached[i] += w * x
            return self._rates(accepted, reached, z)
        if not self._composed():
            return np.cumprod(pooled_rates(z))
        per = aged_counts(((w, b[5]) for w, b in zip(weights, self._batches)), set(self.batch), self.max_steps)
        target = self.shrink_target(lambda: pooled_rates(0.0))
        return batch_prefix_acceptance(self.batch, per.get, target, z)

    def _rates(self, accepted, reached, z: float) -> np.ndarray:
        """Per position, the Wilson bound of accepted / reached (`wilson_upper`), a position never reached carrying
        its predecessor's rate (the prior before position 1: never used, position 1 is always reached when a draft
        exists). In Python floats (`wilson_upper`: the same bits as wilson_upper_array), without a numpy call per
        step on a handful of positions (the controller re-scores after every few rounds, with the
        caches cold after the target's forward)."""
        out, last = [], self.prior_rate
        for a, r in zip(accepted, reached):
            if r > 0:
                last = wilson_upper(float(a), float(r), z)
            out.append(last)
        return np.array(out, dtype=np.float64)

    def verified_counts(self) -> np.ndarray:
        """v_i over the window (for metrics: how many drafts measured each position)."""
        return np.array(self._verified, dtype=np.int64)


class LaggedFeedback(Generic[T]):
    """Results tagged by round id; planning round n sees only rounds <= n - lag.

    `push(round_id, payload)` when the engine retrieves a completed round (in any order);
    `release(n)` when planning round n: returns the payloads that became visible, oldest round
    first, each exactly once. A payload pushed with `round_id=None` is visible at once (the
    caller vouches for the lag). `release(None)` releases everything pushed so far.
    """

    def __init__(self, lag: int):
        if lag < 1:
            raise ValueError(f"lag must be >= 1 (round n cannot see its own result), got {lag}")
        self.lag = lag
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()

    def push(self, round_id: int | None, payload: T) -> None:
        key = float("-inf") if round_id is None else int(round_id)
        heapq.heappush(self._heap, (key, next(self._seq), payload))

    def release(self, planning_round: int | None) -> list[T]:
        horizon = float("inf") if planning_round is None else int(planning_round) - self.lag
        out = []
        while self._heap and self._heap[0][0] <= horizon:
            out.append(heapq.heappop(self._heap)[2])
        return out

    @property
    def pending(self) -> int:
        return len(self._heap)
