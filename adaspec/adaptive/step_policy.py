"""The adaptive draft step's policy (R-C2, R-C5 and adaspec's extensions) and its scoring rule (R-C1).

`StepPolicy` holds the fields of `--adaptive_draft_step_config`'s "policy" (the file's schema,
calibration/schema.DraftStepPolicy, spells them again; a test holds both equal). `best_step` is the
argmax of predicted tokens per ms that every re-score runs (`StepScoring`: the controller's choice between
it and the closed-batch score of closed_step.py); the rules that use them are in step_controller.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .closed_step import closed_throughput, spec_tokens


@dataclass(frozen=True)
class StepPolicy:
    window_size: int = 20
    update_interval: int = 5
    switch_min_gain: float = 0.05
    # at k = 0, speculation is scored this many standard errors above the window's (aged) estimate
    # (Wilson bound) when deciding to leave k = 0; 0 = the point estimate, R-C2's rule unchanged
    zero_confidence: float = 1.0
    # at k >= 1, a re-score that predicts the current k to lose to plain (k = 0) switches to the best
    # candidate even inside switch_min_gain (adaspec's plain floor, issue 13); False = R-C2's rule
    plain_floor: bool = True
    # the plain floor leaves a k >= 1 only when it loses to plain even this many standard errors above the window's
    # estimate (Wilson bound; 0 = at the point estimate): leaving k = 0 needs the same optimism plus switch_min_gain,
    # and a point-estimate floor left marginal k = 1 cells (a 0-4% gain) at plain for half their batches
    floor_confidence: float = 1.0
    # at k = 0, exploration (probes, and the aging that lets k = 0 be left on optimism) runs at the base
    # rates while the cheapest k >= 1 costs at most this much more than plain (relative); dearer
    # speculation is explored proportionally less often, so exploration costs no more per batch
    explore_overhead: float = 0.25
    # a batch of B requests strictly between two calibrated request buckets is priced by interpolating
    # their tables in B, not at the bucket above (step_costs.py); False = R-C3's bucket pricing
    interpolate_buckets: bool = True
    # at k = 0, exploration (probes and aging) slows down by a factor that doubles, up to this, each time it
    # ends back at k = 0 while the batch holds the same requests; a request joining resets it (1 = off)
    max_explore_backoff: int = 8
    # with no request waiting for a slot, score k by the time to finish the batch's remaining work, each request
    # at its own acceptance per depth (closed_step.py), not by the average round, once every request has
    # CLOSED_MIN_DRAFTS drafts in the window. Stop 41's form (one ratio per request) lost on prose at B = 8; the
    # ungated per-depth form won ~2.5% on mixed B = 4 but lost 6-8% on prose in 3 of 4 processes (early drafts
    # spread by chance, read as a drain); gated: mixed 0.983-1.042x, prose 0.999-1.008x, staggered 1.01x the
    # per-round score, rounds priced at shared medians (BENCHMARKS.md stops 41, 43); False = R-C1's per-round score
    closed_batch: bool = True
    # the batch's acceptance is the mean over its own requests of their acceptance in the window, each shrunk
    # towards the window's pooled rate (batch_acceptance.py), and a batch whose requests changed is re-scored at
    # once; needs plan(requests=...) and feedback by round id; False = the window's pooled counts (R-C2)
    per_request: bool = True
    # a request's drafting in a round ends after the first step whose path probability (the product of the draft's
    # probabilities of its own tokens so far) falls below this, and the round verifies only the steps up to it; the
    # draft stops once every request has ended (adaspec's extension: the draft's own confidence, never the target's,
    # so lossless; the controller's k is the ceiling). 0.6: on the mixed stream at B = 1 (k_max 5) 1.555x plain
    # against 1.496x without (paired; one-process A/Bs 0.25 / 0.4 / 0.6 / 0.8: 1.01 / 1.00 / 1.01-1.03 / 0.99x);
    # B >= 4 moved within noise (BENCHMARKS.md stop 44); 0 = every request drafts and verifies k (R-C1). MTP only (not
    # the Suffix drafts, engine/control.py); on CUDA the draft's early end reads the path probabilities once per step
    confidence_stop: float = 0.6
    # k = 1 is priced at the ratio of its served round times to plain rounds' (timed next to each other in the
    # running engine) once known, and a marginal k = 1 runs a plain batch now and then to time it (step_served.py);
    # False = the start-up cost table alone prices (R-C3)
    served_costs: bool = True
    # with the confidence stop, a ceiling k >= 2 is priced at the depth its drafts reach and a draft that stopped short
    # counts as missing the next position, and a round the stop ended at one step d for every request is a served
    # round at k = d (step_depth.py). Off by default: interleaved on one shared table, full-depth pricing ran
    # 0.998x its speed on mixed B = 1, k_max 5 (median of 14 repeats, 0.961-1.030x) and 1.014x on code B = 1, T = 0.8
    # (4 repeats, 0.991-1.016x; ceiling 3 chosen where fixed k = 1 paid): BENCHMARKS.md stop 50. False = every ceiling
    # priced at full depth (R-C1)
    ceiling_pricing: bool = False
    # with the confidence stop, a batch of one greedy request that the controller runs at any k >= 1 drafts up to k_max
    # and the stop alone decides how deep (the controller still decides whether to speculate): at one request a ceiling
    # past the stop's depth costs next to nothing, and on the mixed stream at B = 1 (k_max 5) the stop with ceiling 5
    # ran 1.061x fixed k = 2 where the controller's own ceilings (k = 1 in 61-87% of batches) ran 1.043x; on one table
    # 0.997-1.080x the controller without it there (median 1.009x, 9 repeats); code 0.989-1.004x, chat 0.992-1.002x,
    # prose (whose drafts mostly go deep anyway) 0.988-0.997x (BENCHMARKS.md stop 52). Greedy only: the stop's
    # threshold was measured at temperature 0, and at T = 0.8 every k >= 1 at the ceiling ran 0.975-0.993x; one request
    # only: a batch's draft goes on while any request is confident (B = 4: 0.984-0.991x; both stop 51). The MTP+Suffix
    # draft gets it without the stop: its value rule picks each request's source and depth (engine/control.py,
    # stop 59). False = the controller's k is the ceiling (R-C1)
    greedy_ceiling: bool = True
    # per_request's estimate shrinks each request's own rates towards the rates of the latest batches holding at least
    # this many drafts of every request (the population, batch_acceptance.py), never aged, instead of the window's
    # pooled rates. At one request the window holds only the previous request's last drafts: one request's bad ending
    # started the next plain for 77 tokens where the forced ceiling ran 6.6% faster. Paired on one table against 0:
    # mixed B = 1 (k_max 5) median 1.004x (0.999-1.025x, 12 repeats, 10 >= 1), mixed B = 4 1.005-1.016x, the staggered
    # stream at B = 4 1.016-1.077x (k = 0 in 3% of batches against 31%), code B = 1 1.008-1.019x, chat B = 1
    # 0.995-1.013x, prose B = 1 0.997-1.003x, mixed T = 0.8 0.990-1.001x (BENCHMARKS.md stop 53); 0 = the window's
    # pooled rates (stop 42's rule)
    population_drafts: int = 512
    # a request count whose served ratio is not known yet is priced at the correction (served k = 1 / plain over the
    # table's) of the nearest count of its request bucket that has one, and so is a closed batch's later phase
    # (step_served.py); False = the table alone until the count's own ratio is known
    served_transfer: bool = True

    def __post_init__(self):
        if self.population_drafts < 0:
            raise ValueError(f"policy.population_drafts must be >= 0, got {self.population_drafts}")
        if not 0.0 <= self.confidence_stop < 1.0:
            raise ValueError(f"policy.confidence_stop must be in [0, 1), got {self.confidence_stop}")
        if not self.floor_confidence >= 0:
            raise ValueError(f"policy.floor_confidence must be >= 0, got {self.floor_confidence}")
        if not self.zero_confidence >= 0:
            raise ValueError(f"policy.zero_confidence must be >= 0, got {self.zero_confidence}")
        if self.window_size < 1:
            raise ValueError(f"policy.window_size must be >= 1, got {self.window_size}")
        if self.update_interval < 1:
            raise ValueError(f"policy.update_interval must be >= 1, got {self.update_interval}")
        if self.switch_min_gain < 0:
            raise ValueError(f"policy.switch_min_gain must be >= 0, got {self.switch_min_gain}")
        if self.max_explore_backoff < 1:
            raise ValueError(f"policy.max_explore_backoff must be >= 1, got {self.max_explore_backoff}")
        if not self.explore_overhead > 0:
            raise ValueError(f"policy.explore_overhead must be > 0, got {self.explore_overhead}")


def step_throughput(batch_size: int, prefix_acceptance: Sequence[float], k: int, cost_ms: float) -> float:
    """Predicted tokens per ms of a round with k draft steps."""
    return batch_size * (1.0 + spec_tokens(prefix_acceptance, k)) / cost_ms


def best_step(
    batch_size: int,
    prefix_acceptance: Sequence[float],
    cost_ms_by_k: dict[int, float],
    allow_zero: bool = True,
) -> tuple[int, dict[int, float]]:
    """(argmax k, predicted throughput of every candidate k). Candidates are exactly the table's k
    (k = 0 only if `allow_zero`); ties go to the smaller k."""
    a = np.asarray(prefix_acceptance, dtype=np.float64)
    predicted: dict[int, float] = {}
    for k in sorted(cost_ms_by_k):
        if k < 0 or k > len(a):
            raise ValueError(f"step count {k} outside 0..{len(a)} (prefix_acceptance has {len(a)} positions)")
        if k == 0 and not allow_zero:
            continue
        cost = cost_ms_by_k[k]
        if cost is None or not cost > 0:
            raise ValueError(f"cost_ms for k={k} must be a positive number, got {cost}")
        predicted[k] = step_throughput(batch_size, a, k, cost)
    if not predicted:
        raise ValueError("no candidate step count (empty cost table)")
    best = max(predicted, key=lambda k: (predicted[k], -k))
    return best, predicted


def _best_speculative(batch_size: int, prefix_acceptance, table: dict[int, float]) -> int:
    """The best k >= 1 of a Bcap's table on the point estimate (what a probe runs)."""
    return best_step(batch_size, prefix_acceptance, {k: c for k, c in table.items() if k > 0}, allow_zero=False)[0]


# plan's closed view given as a callable and not yet computed (StepScoring._closed_view)
LAZY = object()


def usable_closed(closed):
    """A closed view the score reads: one of two or more requests (a single request has no drain), else None."""
    return closed if closed and len(closed) > 1 else None


# the closed score (per depth) prices a batch only once each of its requests has this many drafts in the window:
# with ~11 drafts each, prose requests' rates spread 0.78-1.2x the batch's by sampling alone, which the score read
# as a drain, left a paying k = 1 for plain and lost 6-8% in 3 of 4 processes; gated at 16, 1.00x (BENCHMARKS.md
# stop 43)
CLOSED_MIN_DRAFTS = 16


class StepScoring:
    """The draft step controller's score of a step count (a mixin of DraftStepController): R-C1's per-round
    throughput, or in a closed batch the throughput of its remaining work (closed_step.py); needs the
    controller's `_closed` / `_closed_fn` (and its per-plan cache `_depth_view`), `_kv_len`, `allow_zero`,
    `pad_requests`, `covers`, `costs`, `policy` and `window`."""

    def throughput(self, batch_size: int, prefix_acceptance, k: int, table: dict[int, float]) -> float:
        """Predicted tokens per ms at k for the batch being planned: R-C1's per-round score, or, in a closed
        batch (plan's `closed`), the throughput of its remaining work (closed_step.py)."""
        closed = self._closed_view()
        if closed is not None and self._depth_view is None:
            self._depth_view = self._closed_by_depth(closed)
        if closed is None or not self._depth_view:
            return step_throughput(batch_size, prefix_acceptance, k, table[k])
        return closed_throughput(prefix_acceptance, k, self._depth_view,
                                 lambda b: table if b == batch_size else self._table_at(b, table))

    def _closed_view(self):
        """The batch's closed view (plan's `closed`, computed now if it was given as a callable), or None."""
        if self._closed is LAZY:
            self._closed = usable_closed(self._closed_fn())
        return self._closed

    def _best(self, batch_size: int, prefix_acceptance, table: dict[int, float]) -> tuple[int, dict[int, float]]:
        """best_step's (argmax, predicted) under `throughput` (ties to the smaller k)."""
        if self._closed_view() is None:
            return best_step(batch_size, prefix_acceptance, table, self.allow_zero)
        predicted = {k: self.throughput(batch_size, prefix_acceptance, k, table)
                     for k in sorted(table) if k > 0 or self.allow_zero}
        return max(predicted, key=lambda k: (predicted[k], -k)), predicted

    def _closed_by_depth(self, closed):
        """The closed view with each request's relative acceptance per depth k from the window's own per-request
        estimate (closed_step.py), rho_i(k) = sum(a_i[:k]) / mean_j sum(a_j[:k]); `closed` unchanged when the
        window does not price this batch per request; () (the per-round score) while a request of the batch has
        fewer than CLOSED_MIN_DRAFTS drafts in the window."""
        per = self.window.request_prefix_acceptance()
        if per is None or len(per) != len(closed):
            return closed
        if min(self.window.drafts_of(r) for r in self.window.batch) < CLOSED_MIN_DRAFTS:
            return ()
        depth = np.cumsum(per, axis=1)
        mean = depth.mean(axis=0)
        rho = np.divide(depth, mean, out=np.ones_like(depth), where=mean > 0)
        return [(n, tuple(float(x) for x in r)) for (n, _), r in zip(closed, rho)]

    def _loses_even_optimistically(self, batch_size: int, k: int, table: dict[int, float]) -> bool:
        """The plain floor's test: k loses to plain even policy.floor_confidence standard errors above the window's
        estimate (at 0: the point estimate, which the caller has already found below plain)."""
        z = self.policy.floor_confidence
        if z <= 0:
            return True
        upper = self.window.prefix_acceptance(z)
        return self.throughput(batch_size, upper, k, table) < self.throughput(batch_size, upper, 0, table)

    def _table_at(self, b: int, table: dict[int, float]) -> dict[int, float]:
        """The table for b running requests (a closed batch's later phases; the first is `table` itself), at its
        served price (step_served.py) as the batch's own is, or `table` (the whole batch's, an upper bound) where
        b's is not covered or lacks one of its step counts."""
        bcap = self.pad_requests(b)
        smaller, _ = self.costs.bucket(bcap)
        if smaller is None or (self.covers is not None and not self.covers(bcap, self._kv_len)):
            return table
        smaller = self._served_table(b, self.costs.for_batch(b, bcap, smaller, self._kv_len), self._round_id)
        return self._ceiling_priced(b, smaller) if set(smaller) >= set(table) else table
