"""Adaptive draft step count for MTP (R-C1, R-C2, plus k = 0).

One k for the whole batch, maximising the predicted throughput (tokens per ms)

    throughput(k) = B * (1 + sum(prefix_acceptance[:k])) / cost_ms(Bcap, k)

where cost_ms(Bcap, k) is the calibrated cost of a *whole* round with k draft steps at request
bucket Bcap (R-C3) and cost_ms(Bcap, 0) is the plain-decode round (no draft, no verify rows):
throughput(0) = B / cost_ms(Bcap, 0). B scales every candidate alike, so only Bcap (through the
cost table) and the acceptance feedback decide k.

Rules (`StepPolicy`, defaults from R-C2/R-C5):
- feedback: completed batches only, over the last `window_size` batches that carried drafts
  (feedback.AcceptanceWindow); with `lag` (1 synchronous, 2 with schedule overlap) enforced by
  feedback.LaggedFeedback when round ids are given;
- re-scoring happens at the first `plan()` after every `update_interval`-th *completed* batch
  (completed batches are counted, not plan calls; if the lag releases several intervals at once
  the candidates are re-scored once);
- the step count changes only if (best - current) / current > switch_min_gain, strictly; except
  (adaspec's plain floor, `plain_floor`, default on) that a k >= 1 predicted to be slower than plain
  (k = 0), even `floor_confidence` standard errors above the estimate (default 1; step_policy.py says
  why), is left for the best candidate at once: the hysteresis that keeps a k within 5% of the
  best would otherwise let a speculating batch run up to 5% below plain for as long as the estimate
  holds (issue 13: at B = 16 the bundled draft's k = 1 sits a few percent under plain, where the
  table's error decides the sign);
- ties between candidates go to the smaller k (same predicted throughput, less draft work).

Cold start (issue 13): the first covered batch chooses k from the cost table under the stated
prior (`prior_rate` per position, default 0.5: a_i = 0.5^i), the same argmax as every re-score,
instead of k_max (`cold_start="k_max"` keeps the old start, for tests of the re-scoring rules); the
decision record says "cold start". After that the controller never
re-scores on the prior alone (with no draft in the window it keeps k). When the prior's argmax is
k = 0, the first batch that can verify a draft is a probe (the best k >= 1 under the prior, counted as
every probe; the stream's first decoding rounds often verify nothing, their row budget spent on prefill): the
prior is a statement, not a measurement, and waiting the probe interval to measure (48 batches at
B = 8 with the bundled MTP draft, where the table prices k = 1 at 1.6x plain) left held-out prose at
plain decoding for a quarter of a 256-token run while a fixed k = 1 paid 8%.

Exploration is bounded and counted: the only rounds run against the estimate are the k = 0 probes
below, at most 1 / probe_interval of the batches (the probe batch counts towards the next interval)
plus the cold start's one (`probe_rounds`, `exploration_summary()`,
the start-up log line `describe_exploration()`, and the metrics). The other rounds run against it are served
pricing's cost checks (step_served.py: a plain batch in a marginal k = 1 stretch, k = 1 batches at k = 0 while k = 1
is unpriced), counted as `cost_checks`.

Pricing between buckets (adaspec's extension, `interpolate_buckets`, default on; step_costs.py): a batch
between two calibrated buckets is priced in between, and one whose request count changed is re-scored at once.

The batch's own requests (adaspec's extension, `per_request`, default on; batch_acceptance.py): every rule
below prices the batch by its own requests' acceptance, and a batch whose requests changed is re-scored at once;
each request's own rates are shrunk towards the population's (`population_drafts`: the latest few hundred drafts of
every request, never aged), so a request that just joined is not priced at the drafts of whoever came before it.

Closed batches (adaspec's extension, `closed_batch`, default on: step_policy.py; closed_step.py): when no request waits
for a slot (`plan(closed=...)`: per request, its remaining tokens) and every request has enough drafts in the
window, every score above is the throughput of the batch's remaining work, each request at its own acceptance per
depth, not of the average round.

Coverage: the candidates for a Bcap are the k in {1..k_max} (plus 0 when `allow_zero`) whose cost
is covered. If any k >= 1 is not covered at this Bcap (cost_ms returns None), the batch has no
request bucket, or the optional `covers(bcap, kv_len)` (e.g. CostTable.covers with the batch's
longest KV length, R-F7) says no, the batch runs at k_max (full width) and the decision record
says so; the controller's own k is kept for covered batches. A missing k = 0 cost only removes
k = 0. `cost_ms` must be a pure function of (bcap, k): its values are cached per Bcap.

Confidence stop (adaspec's extension, `confidence_stop`, default 0.6; step_policy.py): k is a ceiling, each request
verifies its drafts up to the first whose path probability is below the threshold (engine/control.py puts it in the
plan, runner/round_runner.py applies it); the window then sees shorter verifies, which it treats as censored. With
`greedy_ceiling` (default on), engine/control.py runs a batch of one greedy request that this controller puts at any
k >= 1 at k_max instead, the stop deciding the depth: plan() still returns (and counts) its own k.

Leaving k = 0 (adaspec's extension, `zero_confidence`, default 1): at k = 0 the re-score scores every k >= 1 at the window's aged upper confidence bound and leaves for the
cheapest k >= 1 that beats plain there by more than `switch_min_gain` (`_leave_zero`; step_explore.py says why).

k = 0 is sticky by nature: a batch without drafts yields no acceptance feedback. With
`probe_interval` > 0, after that many completed batches at k = 0 the controller plans one batch
at the best k >= 1 under the current estimate (a probe, recorded; issue 13: the cheapest useful
look, not k_max, so a probe costs at most one draft step and row more than a plain round, and
probes can come every 20 batches) so the window can notice that speculation pays again. A round
at k = 0 does not call the drafter; its refresh entries wait for the next drafting round
(round_runner.py).

Exploration priced by the table and its backoff: step_explore.py.

Pricing k = 1 from served round times, and the cost checks that time it (`served_costs`, default on):
step_served.py.

Ceilings priced at the depth they reach (`ceiling_pricing`, default off, with the confidence stop): step_depth.py.

"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .feedback import DEFAULT_PRIOR_RATE, AcceptanceWindow, LaggedFeedback
from .step_costs import StepCostTables
from .step_depth import CeilingPricing
from .step_explore import StepExploration
from .step_served import ServedPricing
from .step_policy import (LAZY, StepPolicy, StepScoring, _best_speculative, best_step, step_throughput,
                          usable_closed)

__all__ = ["CostFn", "DraftStepController", "StepDecision", "StepPolicy", "best_step", "step_throughput"]

CostFn = Callable[[int, int], "float | None"]


@dataclass(frozen=True)
class StepDecision:
    completed: int  # completed batches visible when decided
    batch_size: int
    bcap: int | None
    previous_k: int
    k: int  # the k this decision put in force (for a fallback/probe: this batch only)
    reason: str  # "switch", "floor" (plain_floor), "keep", "no feedback", "fallback: ...", "probe", "cost check"
    predicted: dict[int, float] = field(default_factory=dict)
    gain: float | None = None  # (best - current) / current
    optimistic: dict[int, float] = field(default_factory=dict)  # at k = 0: k >= 1 under the aged upper bound


class DraftStepController(StepExploration, StepScoring, ServedPricing, CeilingPricing):
    """observe() completed batches, plan() one k per batch (R-C1, R-C2)."""

    def __init__(
        self,
        k_max: int,
        policy: StepPolicy = StepPolicy(),
        cost_ms: CostFn | None = None,
        pad_requests: Callable[[int], "int | None"] | None = None,
        *,
        allow_zero: bool = True,
        lag: int = 1,
        probe_interval: int = 20,
        prior_rate: float = DEFAULT_PRIOR_RATE,
        covers: Callable[[int, "int | None"], bool] | None = None,
        buckets: Sequence[int] | None = None,
        history: int = 1024,
        cold_start: str = "prior",
    ):
        if cold_start not in ("prior", "k_max"):
            raise ValueError(f"cold_start must be 'prior' or 'k_max', got {cold_start!r}")
        if k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {k_max}")
        if cost_ms is None or pad_requests is None:
            raise ValueError("DraftStepController needs cost_ms(bcap, k) and pad_requests(B)")
        if probe_interval < 0:
            raise ValueError(f"probe_interval must be >= 0 (0 = never probe), got {probe_interval}")
        self.k_max, self.policy = k_max, policy
        self.cost_ms, self.pad_requests, self.covers = cost_ms, pad_requests, covers
        self.allow_zero, self.probe_interval = allow_zero, probe_interval
        self.window = AcceptanceWindow(k_max, policy.window_size, prior_rate, policy.population_drafts)
        self.feedback: LaggedFeedback[tuple] = LaggedFeedback(lag)
        self._round_requests: dict[int, tuple] = {}  # round id -> its decoding requests (plan's `requests`)
        self.k = k_max
        self._cold = cold_start == "prior"  # the first covered batch chooses k under the prior
        self._cold_probe = False  # the prior chose k = 0 and no probe has measured it yet
        self.probe_rounds = 0
        self.last_probe = False  # whether the batch plan() returned last is a probe
        self._epoch = 0  # completed // update_interval at the last re-score
        self._zero_since = 0  # completed count when k = 0 took effect (or the last probe)
        self._zero_entered = 0  # completed count when k = 0 took effect (probes do not reset it)
        # per-bucket tables; with `buckets` (the calibrated request buckets) and policy.interpolate_buckets,
        # a batch between two of them is priced in between (step_costs.py)
        self.costs = StepCostTables(k_max, cost_ms, allow_zero, buckets if policy.interpolate_buckets else None,
                                    covers)
        self._scored_table: dict[int, float] | None = None  # the table the last re-score used
        self._scored_base: dict[int, float] | None = None  # ... before served pricing (step_served.py)
        self._scored_batch: frozenset = frozenset()  # the requests the last re-score judged (policy.per_request)
        self.backoff = 1  # exploration at k = 0 runs this many times slower (policy.max_explore_backoff)
        self._scale_of: tuple | None = None  # (table, explore_scale before the backoff), memoised (step_explore.py)
        self._batch: frozenset = frozenset()  # the requests of the batch being planned (when given)
        self._backoff_batch: frozenset = frozenset()  # the requests when the backoff last grew
        self._looked = False  # a probe or an optimistic stay ran since k = 0 was last confirmed
        self._closed = None  # this plan's (remaining tokens, relative acceptance) per request, when closed
        self._closed_fn = None  # ... or what computes it, when plan() was given a callable (step_policy.LAZY)
        self._depth_view = None
        self._kv_len: int | None = None
        self._round_id: int | None = None  # the round being planned (served prices of a closed batch's phases)
        self._fallback_bcap: object = ()  # (bcap, why) of the last recorded fallback: one record per episode
        self.decisions: deque[StepDecision] = deque(maxlen=history)
        self.k_histogram: Counter[int] = Counter()  # k returned by plan(), per batch
        self._init_served()
        self._init_depth(k_max)

    @property
    def completed(self) -> int:
        return self.window.completed

    # ---- feedback -----------------------------------------------------------------------
    def observe(self, verify_lens: list[int], num_accepted: list[int], round_id: int | None = None,
                ceilings: Sequence[int] | None = None) -> None:
        """A completed batch's result (from the normal result path, R-C4). With `round_id`, it is
        used only when planning a round >= round_id + lag, and its requests are those plan() was given.
        `ceilings`: per request, the most it could verify, when a confidence stop may end drafts earlier
        (step_depth.py)."""
        ids = self._round_requests.pop(round_id, None) if round_id is not None else None
        if ids is not None and len(ids) != len(verify_lens):
            ids = None
        if ceilings is not None and not self.policy.ceiling_pricing:
            ceilings = None
        self.feedback.push(round_id, (list(verify_lens), list(num_accepted), ids,
                                      None if ceilings is None else list(ceilings)))

    # ---- planning -----------------------------------------------------------------------
    def plan(self, batch_size: int, round_id: int | None = None, kv_len: int | None = None,
             can_verify: bool = True, requests=None, closed=None) -> int:
        """The step count for the batch about to be submitted (round `round_id`; `kv_len`: the
        batch's longest KV length, only passed on to `covers`). `can_verify` False: no request of this
        batch may verify a draft token (prefill took the round's row budget, or every request is at
        its last token); a probe due then waits for a batch whose drafts can be measured. `requests`: the
        batch's request ids (any hashables), for the exploration backoff: a request that joined since the
        backoff last grew resets it. `closed`: when no request waits for a slot, per request (remaining
        tokens, acceptance relative to the batch's), or a callable that returns it (called only if a score
        needs it): k is then scored by closed_step.closed_throughput."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.last_probe = self.last_check = False
        for lens, acc, ids, ceilings in self.feedback.release(round_id):
            self.window.observe(lens, acc, ids, ceilings)
            if ceilings is not None:
                self._ceilings_seen = True
                self.depth.observe(lens, ceilings)

        if not self.policy.closed_batch:
            self._closed = None
        elif callable(closed):  # computed only if a score reads it (most batches are not re-scored)
            self._closed, self._closed_fn = LAZY, closed
        else:
            self._closed = usable_closed(closed)
        self._kv_len = kv_len
        self._round_id = round_id
        if requests is not None:
            ids = tuple(requests)
            self._batch = frozenset(ids)
            if self.backoff > 1 and self._batch - self._backoff_batch:
                self.backoff = 1  # a new request: what the looks found was about others
            if round_id is not None:
                self._round_requests[round_id] = ids
                if len(self._round_requests) > 64:  # a round that never reported (it failed)
                    del self._round_requests[min(self._round_requests)]
            self.window.batch = ids if self.policy.per_request else None
        self._depth_view = None  # the closed view per depth, computed when a score first needs it
        bcap = self.pad_requests(batch_size)
        table, missing = self.costs.bucket(bcap)
        episode = (bcap, "cost")
        if table is not None and self.covers is not None and not self.covers(bcap, kv_len):
            table, episode = None, (bcap, "kv")
            missing = f"bcap={bcap}, kv_len={kv_len} outside the calibrated coverage; running k_max={self.k_max}"
        if table is None:
            if self._fallback_bcap != episode:
                self._fallback_bcap = episode
                self.decisions.append(
                    StepDecision(self.completed, batch_size, bcap, self.k, self.k_max, f"fallback: {missing}")
                )
            self.k_histogram[self.k_max] += 1
            return self.k_max
        self._fallback_bcap = ()
        base = self.costs.for_batch(batch_size, bcap, table, kv_len)
        epoch = self.completed // self.policy.update_interval
        if epoch > self._epoch or self._continuation is None:
            self._refresh_depth()  # the depth a ceiling reaches, re-read only when the batch is re-scored
        table = self._served_table(batch_size, base, round_id)  # k = 1 at its served price, once known
        table = self._ceiling_priced(batch_size, table)  # k >= 2 at the depth its drafts reach (step_depth.py)
        if self._scored_table is None:
            self._scored_table = table  # the first covered batch's table; a later one re-scores at once
            self._scored_batch, self._scored_base = self._batch, base

        if self._cold:
            self._cold = False
            previous = self.k
            best, predicted = self._best(batch_size, self.window.prefix_acceptance(), table)
            self.k = best
            if best == 0:
                self._zero_since = self._zero_entered = self.completed
                self._cold_probe = bool(self.probe_interval)
            self.decisions.append(StepDecision(self.completed, batch_size, bcap, previous, best,
                                               f"cold start (prior rate {self.window.prior_rate:g})", predicted))

        repriced = table is not self._scored_table  # the request count or k = 1's served price changed
        if base is not self._scored_base:
            self.backoff = 1  # the looks that backed off were judged on another request count's table
        recomposed = self.window.batch is not None and self._batch != self._scored_batch
        if epoch > self._epoch or ((repriced or recomposed) and self.window.has_data):
            self._epoch = max(epoch, self._epoch)
            self._rescore(batch_size, bcap, table)
            self._scored_table, self._scored_batch, self._scored_base = table, self._batch, base

        k = self.k
        if self.window.has_data:
            self._cold_probe = False  # measured: the periodic probes take over
        due = k == 0 and can_verify and not self._run_left and (
            self._cold_probe or self.probe_interval and self.completed - self._zero_since >= self.probe_every(table))
        if due:
            self._cold_probe = False
            self._zero_since = self.completed
            self._looked = True
            k = _best_speculative(batch_size, self.window.prefix_acceptance(), table)
            self.probe_rounds += 1
            self.last_probe = True
            self.decisions.append(StepDecision(self.completed, batch_size, bcap, 0, k, "probe"))
        elif self._cost_check(batch_size, k, table, can_verify, round_id):
            k, self.last_check = 0, True
            self.decisions.append(StepDecision(self.completed, batch_size, bcap, self.k, 0, "cost check"))
        elif self._zero_cost_check(batch_size, k, table, can_verify, round_id):
            k, self.last_check = 1, True  # k = 1 timed next to plain rounds (step_served.py)
            self.decisions.append(StepDecision(self.completed, batch_size, bcap, 0, 1, "cost check"))
        self.k_histogram[k] += 1
        return k

    def _rescore(self, batch_size: int, bcap: int, table: dict[int, float]) -> None:
        previous, floor = self.k, False
        if not self.window.has_data:
            self.decisions.append(StepDecision(self.completed, batch_size, bcap, previous, previous, "no feedback"))
            return
        a = self.window.prefix_acceptance()
        best, predicted = self._best(batch_size, a, table)
        optimistic: dict[int, float] = {}
        if previous == 0 and 0 in predicted and self.policy.zero_confidence > 0 and len(predicted) > 1:
            best, gain, optimistic = self._leave_zero(batch_size, table, predicted[0])
            switch = gain > self.policy.switch_min_gain
        elif previous in predicted:
            current = predicted[previous]
            gain = (predicted[best] - current) / current
            switch = gain > self.policy.switch_min_gain
            if (not switch and self.policy.plain_floor and previous > 0 and 0 in predicted
                    and predicted[0] > current and self._loses_even_optimistically(batch_size, previous, table)):
                switch, floor = True, True  # speculating is predicted to lose: no hysteresis below plain
        else:  # the current k is no candidate here (k = 0 without a plain-decode cost)
            gain, switch = None, True
        self._explored(previous, best if switch else previous, bool(optimistic), batch_size, table)
        if switch and best != previous:
            self.k = best
            if best == 0:
                self._zero_since = self._zero_entered = self.completed
        self.decisions.append(
            StepDecision(self.completed, batch_size, bcap, previous, self.k,
                         ("floor" if floor else "switch") if self.k != previous else "keep", predicted, gain,
                         optimistic)
        )
