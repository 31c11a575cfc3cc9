"""How the adaptive draft step explores at k = 0 (a mixin of DraftStepController, step_controller.py).

Exploration priced by the table (adaspec's extension, `explore_overhead`, default 0.25). Both ways
out of k = 0 cost speculative batches that the point estimate says lose. Their price is the table's:
at greedy B = 16 the cheapest k >= 1 cost 1.7x plain, so a probe every 20 batches plus the optimistic
stays at k = 1 cost ~4% of plain's throughput while plain was right (0.96x plain, BENCHMARKS.md), where
at B = 1 (1.2x) the same rates cost ~1%. With s = max(1, overhead / explore_overhead) at a Bcap
(overhead = cheapest k >= 1 over plain, relative; `explore_scale`), probes come every
ceil(probe_interval * s) batches (`probe_every`) and the evidence's half-life is window_size * s
batches, so exploration costs about the same share of a plain batch wherever speculation is dear; at
overheads up to explore_overhead nothing changes. A batch's evidence ages from when k = 0 took effect
or, if later, from when it was observed: a probe's result is fresh evidence, not as old as the
batches before it (feedback.AcceptanceWindow.aged_prefix_acceptance).

Exploration backs off while the batch holds the same requests (adaspec's extension,
`max_explore_backoff`, default 8; the plain floor of adaptive verify does the same, floor.py). A look
(a probe, or a stay at k >= 1 entered on the optimistic bound) whose re-score ends back at k = 0 with
every k >= 1 losing to plain even at the window's upper bound doubles `backoff`, which multiplies `explore_scale` (probe interval and half-life alike) where
speculation is dear (scale > 1: nowhere at B = 1 on this machine), up to the maximum; a re-score that keeps a k >= 1 on the measurement resets it, and so does a request joining the
batch (`plan(requests=...)`: a request not in the batch when the backoff last grew), whose acceptance
no look has measured, and a change in the request count (the looks were judged on another table: on the
staggered stream, where requests join and leave every few seconds, the backoff without this reset ran
0.943-0.956x the fixed k = 1 against 0.976x without the backoff, BENCHMARKS.md stop 41). In a closed batch on which plain is right (chat at B = 4: 41 speculative rounds
of 763, each 1.5x a plain round, cost ~2.4% of the run, bench/round_kinds.py, stop 40) the looks
thin out geometrically instead of costing a fixed share of every run.

Leaving k = 0 (adaspec's extension, `zero_confidence`, default 1; the controller's `_leave_zero`). At k = 0
the window cannot refresh (only probes add a batch), so its evidence ages: the
re-score scores every k >= 1 at the window's upper confidence bound (Wilson,
`zero_confidence` standard errors) computed as if the window held 2^(-t / window_size) of its
counts, t = batches since k = 0 took effect (a probe's batch: since it was observed; the half-life
grows where speculation is dear, above), and leaves k = 0 for the *cheapest* k >= 1 that
beats plain by more than `switch_min_gain` there (`_leave_zero`); from that k on, R-C2's rules
move it. (Leaving to the point-best k instead sent greedy B = 8 to k = 2, the most expensive
look, in a quarter of its batches: 0.966x plain, BENCHMARKS.md.) A call that was close is
revisited within a few batches, a clear loss only after the bound has widened for several
windows, so exploration follows the margin. At B = 1 the window holds 20 drafts and one unlucky
stretch parked the symmetric rule at k = 0 (issue 13's T = 0.8 cell: 52% of batches at k = 0
where a fixed k = 1 paid 7%). `zero_confidence = 0` keeps the symmetric rule (k = 0 left only
through probes).
"""

from __future__ import annotations

import math

# a look that ended at k = 0 backs exploration off only if every k >= 1 loses to plain even this many standard
# errors above the window's estimate (Wilson bound): at one, a batch of two requests whose k = 1 paid 3-6% backed
# off in 2-3 of 10 seeded runs (the look ends at k = 0 just when the estimate is unluckily low)
BACKOFF_Z = 2.0


class StepExploration:
    """Exploration rates, the backoff and what the log and metrics say about them; needs the controller's
    `policy`, `probe_interval`, `window`, `k_histogram`, `probe_rounds`, `backoff`, `_looked`, `_batch`,
    `_backoff_batch`, `_zero_entered`, `_scale_of`, `completed` and `throughput`; `_leave_zero` is the rule that
    leaves k = 0."""

    def describe_exploration(self) -> str:
        share = f"<= {100.0 / self.probe_interval:.1f}% of batches" if self.probe_interval else "never"
        return (f"[adaspec] exploration: the first batch chooses k from the cost table under a prior acceptance "
                f"of {self.window.prior_rate:g} per position (not k_max); at k = 0 one probe batch runs the best "
                f"k >= 1 after every {self.probe_interval} batches (probe rate {share}; and the first batch, when the "
                f"prior alone chose k = 0); k = 0 is left when speculation "
                f"{self.policy.zero_confidence:g} standard errors above the measured acceptance, whose weight halves "
                f"every {self.policy.window_size} batches at k = 0, beats plain by > {self.policy.switch_min_gain:g}; where "
                f"the cheapest k >= 1 costs more than {1 + self.policy.explore_overhead:g}x plain, probes and aging slow "
                f"down in proportion (policy.explore_overhead), and they back off x2 per look that ends at k = 0, up "
                f"to x{self.policy.max_explore_backoff}, until the batch's requests change (policy.max_explore_backoff)")

    def exploration_summary(self) -> dict:
        rounds = sum(self.k_histogram.values())  # every batch planned, fallbacks included (as /metrics)
        return {"rounds": rounds, "probes": self.probe_rounds,
                "probe_share": self.probe_rounds / rounds if rounds else 0.0}

    def _explored(self, previous: int, k: int, from_zero: bool, batch_size: int, table: dict[int, float]) -> None:
        """The exploration backoff after a re-score from `previous` to `k`: a look (a probe, or leaving k = 0
        on the optimistic bound) that ends back at k = 0 where every k >= 1 loses to plain even at the
        window's upper bound (BACKOFF_Z standard errors, not aged) doubles it: a verdict that close
        is the noise of a few batches (one request's 20 drafts at B = 1), and backing off would freeze it; a
        k >= 1 that a re-score on the measurement keeps resets it."""
        if from_zero and k > 0:
            self._looked = True  # left k = 0 on optimism: the next re-scores judge it
        elif k == 0 and self._looked:  # a probe's batch, or the stay it started, ended back at k = 0
            self._looked = False
            upper = self.window.prefix_acceptance(BACKOFF_Z)
            spec = [self.throughput(batch_size, upper, j, table) for j in table if j > 0]
            if 0 in table and spec and max(spec) < self.throughput(batch_size, upper, 0, table):
                self.backoff = min(self.policy.max_explore_backoff, 2 * self.backoff)
                self._backoff_batch = self._batch
        elif previous > 0 and k > 0:
            self._looked, self.backoff = False, 1

    def explore_scale(self, table: dict[int, float]) -> float:
        """How much slower than the base rates k = 0 explores at this Bcap's table: (cost of the cheapest
        k >= 1 over plain, relative) / policy.explore_overhead, at least 1 (1 without a plain cost), times
        the backoff where that exceeds 1. Where a look is cheap (k = 1 at 1.09x plain at B = 1) nothing
        backs off: the look costs little and missing a paying k costs much (bench/step_control_sim.py at
        B = 1, a = 0.15-0.2: 0.975-0.977x the best fixed k with the backoff, 0.983x without)."""
        if 0 not in table or len(table) < 2:
            return 1.0
        cached = self._scale_of  # (table, its scale before the backoff): asked every batch at k = 0
        if cached is None or cached[0] is not table:
            overhead = (min(c for k, c in table.items() if k > 0) - table[0]) / table[0]
            cached = self._scale_of = (table, overhead / self.policy.explore_overhead)
        scale = cached[1]
        return scale * self.backoff if scale > 1 else 1.0

    def probe_every(self, table: dict[int, float]) -> int:
        """Batches at k = 0 between probes at this Bcap: probe_interval, scaled by `explore_scale`."""
        return math.ceil(self.probe_interval * self.explore_scale(table))

    def _leave_zero(self, batch_size, table, plain):
        """At k = 0: (the k >= 1 to leave to, its optimistic gain over plain, the optimistic
        throughputs). The bound is the window's Wilson bound at `zero_confidence` standard errors
        with each batch's counts weighted 2^(-t / (window_size * explore_scale)), t = batches at k = 0
        since k = 0 took effect or since the batch, if later (a probe). The k left to is the
        *cheapest* k >= 1 (lowest table cost) whose optimistic gain beats the min gain, the
        cheapest look that could pay; when none does, the optimistic best, whose gain then says
        why not."""
        upper = self.window.aged_prefix_acceptance(self.policy.zero_confidence, self.completed, self._zero_entered,
                                                   self.policy.window_size * self.explore_scale(table))
        optimistic = {k: self.throughput(batch_size, upper, k, table) for k in table if k > 0}
        gains = {k: (t - plain) / plain for k, t in optimistic.items()}
        paying = [k for k in sorted(gains, key=lambda k: (table[k], k)) if gains[k] > self.policy.switch_min_gain]
        k_spec = paying[0] if paying else max(gains, key=lambda k: (gains[k], -k))
        return k_spec, gains[k_spec], optimistic
