"""Speculation priced from the rounds the engine serves (adaspec's extension of R-C3, issue 13; a mixin of
DraftStepController, step_controller.py).

The cost table is measured once, at start-up, on synthetic requests. Where speculation is marginal its error
decides the sign: on the Zen 4 VM of stop 46 a process's table priced MTP k = 1 at mixed B = 4 at 1.48x a plain
round while its k = 1 rounds were served at 1.34x, and in chat at B = 4 and prose at B = 8 the draft step kept a
k = 1 that lost 2-4% to plain (BENCHMARKS.md, stop 46). The engine times every round anyway (RoundEvent), so the
draft step measures what k = 1 costs relative to a plain round *as served*, and prices speculation by it.

- **The served ratio** (`ServedRatio`): every pure plain round (k = 0, decode only, no probe) whose neighbours
  within `NEIGHBOURS` rounds include at least `MIN_NEIGHBOURS` pure k = 1 rounds of the same request count gives a
  sample, median(neighbours' ms) / its ms. With `policy.ceiling_pricing` (step_depth.py), and in the rounds of the
  greedy ceiling (`policy.greedy_ceiling`, engine/control.py), a round of a deeper k in which the confidence stop
  ended every request at step 1 is a k = 1 round as served (`served_kind`). A k = 1 round counts only when the round
  before it was a pure k = 1 round too: the first drafting round after a plain one catches up on the plain round's
  deferred draft context (round_runner.py), a cost of switching, not of k = 1. Neighbours on both sides cancel the
  slow growth of the KV length, and a ratio of rounds a few milliseconds apart cancels most of a busy machine's
  drift. The ratio for B requests is the median of its last `SAMPLES` samples, once it has `MIN_SAMPLES` of them no
  older than `MAX_AGE` rounds; before that (and for k = 0 never served next to k = 1) the table alone prices.
- **Pricing** (`_served_table`): with a served ratio rho for the batch's request count, k = 1 costs rho times the
  table's plain round, and a deeper k at least what the k below it costs (the table's k >= 2 are otherwise kept: no
  round measured them; scaling them all by k = 1's correction ran mixed B = 1, where deep k pays, at 1.351x plain
  against the table's 1.373x, moving k = 1 only at 1.423x against 1.375x: BENCHMARKS.md, stop 47). Every rule (the
  re-score, the plain floor, leaving k = 0, exploration's price) then reads the served price; a new ratio re-prices
  the batch at once, as a new request count does, but keeps the exploration backoff (step_explore.py): samples arrive
  with every look, so resetting it on each would undo it.
- **Across request counts** (`policy.served_transfer`, default on): samples are per exact request count, and most
  counts get few (a closed batch's tail runs at 3, 2, 1 requests for a few dozen rounds; a stream whose requests
  come and go moves between counts), so a count without its own ratio is priced at the *correction* (served ratio
  over the table's k = 1 / plain) of the nearest count that has one in the same request bucket (the larger on a
  tie), applied to its own table's k = 1 / plain; its own ratio replaces it once known, and it ages out with the
  samples it came from. Only within a bucket: a bucket's points are calibrated together, one after another, so they
  share its drift (robust.py's drift check is per bucket too); another bucket's error is its own. The closed
  score's later phases (step_policy.py `_table_at`, fewer requests running) are priced the same way, and its first
  phase at the batch's own served price (before, the closed score re-read every phase, the first included, from
  the table, so that a known served price changed nothing in a closed batch past the closed score's gate). On the
  bench's cold start-ups neither changes much: in mixed B = 4, one closed batch per repeat, the count's own ratio
  is known only in the last third of the batch, if at all (BENCHMARKS.md, stop 55).
- **Cost checks**: at k = 1 a plain round is needed next to k = 1 rounds. While the k = 1 the controller keeps is
  marginal (its predicted gain over plain, at the point estimate and the current price, below `CHECK_MARGIN`),
  a batch runs at k = 0 every `check_interval(gain)` batches while the ratio is unknown: `CHECK_EVERY` at a gain near
  the margin, down to `CHECK_MIN_EVERY` at a gain near 0 or below (one in `CHECK_EVERY_KNOWN` once the ratio is known);
  the decision record says "cost check" and `cost_checks` counts them (the summary, the start-up log, the metrics). A
  check costs about the predicted gain of one batch, hence the interval in proportion: at one in 16 whatever the
  gain, five samples took ~80 k = 1 batches, and a table that priced k = 1 at chat B = 4 at 1.33x plain where it was
  served at 1.53x kept k = 1 for 90 of 226 batches at 0.93-0.95x plain (BENCHMARKS.md, stop 56). Where k = 1 is
  not marginal there are none.
- **Cost checks at k = 0**: at k = 0 the served ratio is never learnt (no k = 1 round runs; a probe follows a plain
  round, so it is no steady neighbour, and at the greedy ceiling it drafts deeper), so a table that overprices k = 1
  keeps the controller plain for good: on the Zen 4 VM a start-up whose calibration ran next to another priced k = 1
  at 1.64x plain where it was served at ~1.17x, and the draft step ran k = 0 in 44% of its batches at 1.007x the best
  fixed setting (BENCHMARKS.md, stop 53). So while the ratio for the batch's request count is unknown and k = 1 is
  marginal at k = 0 (at the table's price and the upper bound that leaves k = 0, `policy.zero_confidence` standard
  errors above the window's estimate, predicted to lose less than `CHECK_MARGIN` / B to plain, B the request count), one
  batch in `CHECK_EVERY` starts a run of `CHECK_RUN` consecutive k = 1 batches (plain k = 1: no greedy ceiling). Its
  second and later rounds are steady k = 1 rounds, so every plain round within `NEIGHBOURS` of them gives a sample:
  one run prices k = 1. They count as cost checks (decision "cost check", `cost_checks`) and feed the window as any
  drafting batch does. Once the ratio is known they stop; a k = 1 that loses more than the margin is never run. The
  margin shrinks with the batch because a run's cost grows with it: every request catches up on the draft context its
  plain rounds deferred (a probe drafts for a quarter of the batch), and a closed batch's ends drift apart. At B = 1,
  on a table whose k >= 1 costs were raised by 40% (k = 1 at 1.7x plain), the draft step ran 1.144-1.180x the same
  without runs; at chat B = 8, where k = 1 loses ~25%, a run at the margin of B = 1 cost 0.4% (BENCHMARKS.md, stop 54).

Only k = 1 is measured: above it the confidence stop makes a round's depth vary (step_policy.py), so the table's k
prices it. MTP only (engine/control.py reports round times for MTP): a Suffix draft's round verifies only what matched.

Nothing here reads the target or changes what a round verifies beyond choosing k, so it is lossless as every k is.
Without round timings (`observe_round` never called, or `policy.served_costs` off) the table alone prices and no
check runs: decisions are exactly those of the table-only controller.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import NamedTuple

NEIGHBOURS = 5  # rounds on either side of a plain round searched for k = 1 neighbours
MIN_NEIGHBOURS = 2
SAMPLES = 9  # the ratio is the median of this many latest samples
MIN_SAMPLES = 5
MAX_AGE = 4096  # rounds after which a sample no longer prices
CHECK_MARGIN = 0.2  # a k = 1 predicted to gain less than this over plain is checked (the table's error is ~10%)
CHECK_EVERY = 16  # batches at k = 1 between cost checks while the ratio is unknown, at a gain near CHECK_MARGIN
CHECK_MIN_EVERY = 4  # ... and where the predicted gain is small (a check costs about the gain: check_interval)
CHECK_EVERY_KNOWN = 64  # ... and once it is known
CHECK_RUN = 3  # k = 1 batches in a row that a cost check at k = 0 runs: its second and later are steady k = 1 rounds


def k1_gain(a1: float, table: dict[int, float]) -> float:
    """k = 1's predicted gain over plain (relative) at acceptance a1 and `table`'s prices: R-C1's throughput ratio
    (1 + a1) / cost(1) over 1 / cost(0), less 1 (what both kinds of cost check judge the margin by)."""
    return (1.0 + a1) * table[0] / table[1] - 1.0


def check_interval(gain: float) -> int:
    """k = 1 batches until the next cost check while the served ratio is unknown, given k = 1's predicted gain over
    plain at the last check: a plain check batch costs about that gain of one batch, so the interval grows with it,
    CHECK_EVERY at CHECK_MARGIN, and at least CHECK_MIN_EVERY (module docstring)."""
    return min(CHECK_EVERY, max(CHECK_MIN_EVERY, math.ceil(CHECK_EVERY * gain / CHECK_MARGIN)))


def served_kind(num_steps: int, caps, verify_lens, stop_below: float, decode_only: bool, probe: bool,
                subset: bool) -> tuple[int, bool]:
    """(the step count a completed round was served at, whether it is pure) from its plan (`num_steps`, per-request
    `caps`, the confidence stop's `stop_below`, `probe`, a draft-only `subset`) and what it verified. Pure: decode
    only, no probe or subset, every request verified the same d draft tokens, with d the plan's k, or d < k where
    the confidence stop ended every request at step d and no cap stopped one earlier: the draft stops once every
    request has ended, so that round drafted d steps and verified d + 1 rows per request, a round at k = d as served
    (at code B = 1, T = 0.8 a k = 2 round stopped at 1 took 20.3 ms, the k = 1 rounds 21.3 ms, fixed k = 1's
    20.8 ms: stop 49), and prices k = d while the controller runs deeper k."""
    k = num_steps
    d = verify_lens[0] if verify_lens else 0
    uniform = all(L == d for L in verify_lens)
    stopped = uniform and 0 < d < k and stop_below > 0 and all(c >= k for c in caps)
    pure = decode_only and not probe and not subset and uniform and (d == k or stopped)
    return (d if stopped else k), pure


class _Round(NamedTuple):
    batch_size: int
    k: int
    ms: float
    pure: bool


class ServedRatio:
    """What a k = 1 round costs over a plain round, per request count, from served round times (module docstring)."""

    def __init__(self):
        self._rounds: dict[int, _Round] = {}
        self._samples: dict[int, deque[tuple[int, float]]] = {}
        self.last_round: int | None = None
        self._last_k1: int | None = None  # the latest pure k = 1 round recorded
        self._appended = 0  # samples appended so far (the ratio cache's version)
        # per request count: the version, the round it was computed at and the last it holds for, the ratio
        self._ratios: dict[int, tuple] = {}

    def record(self, round_id: int, batch_size: int, k: int, ms: float, pure: bool) -> None:
        """A completed round (rounds are recorded in id order; a failed round is simply missing)."""
        rec = self._rounds[round_id] = _Round(batch_size, k, float(ms), bool(pure) and ms > 0)
        if rec.pure and k == 1 and (self._last_k1 is None or round_id > self._last_k1):
            self._last_k1 = round_id
        self.last_round = round_id
        # rounds arrive in id order, so the dict's (insertion) order is id order: drop from the front (a scan of
        # every kept round, and of the centre's ten neighbours, per round led the controller's profile at k = 0)
        cutoff = round_id - 2 * NEIGHBOURS - 1
        while (first := next(iter(self._rounds))) < cutoff:
            del self._rounds[first]
        centre = round_id - NEIGHBOURS  # every neighbour of this round has now completed
        if self._last_k1 is None or self._last_k1 < centre - NEIGHBOURS:
            return  # no pure k = 1 round among its neighbours (steady k = 0): no sample, nothing to scan
        c = self._rounds.get(centre)
        if c is None or not c.pure or c.k != 0:
            return
        near = [self._rounds[j].ms for j in range(centre - NEIGHBOURS, centre + NEIGHBOURS + 1)
                if j != centre and self._steady(j, c.batch_size)]
        if len(near) >= MIN_NEIGHBOURS:
            samples = self._samples.setdefault(c.batch_size, deque(maxlen=SAMPLES))
            samples.append((centre, statistics.median(near) / c.ms))
            self._appended += 1

    def _steady(self, j: int, batch_size: int) -> bool:
        """Round j is a pure k = 1 round of `batch_size` requests after one like it (module docstring)."""
        r, before = self._rounds.get(j), self._rounds.get(j - 1)
        return all(x is not None and x.pure and x.k == 1 and x.batch_size == batch_size for x in (r, before))

    def samples(self, batch_size: int, now: int | None = None) -> list[float]:
        """The current samples for `batch_size` requests (those no older than MAX_AGE rounds)."""
        return [x for _, x in self._kept(batch_size, self.last_round if now is None else now)]

    def _kept(self, batch_size: int, now: int | None) -> list[tuple[int, float]]:
        """(round, sample) for `batch_size` requests no older than MAX_AGE rounds at `now` (None: all)."""
        return [(r, x) for r, x in self._samples.get(batch_size, ()) if now is None or now - r <= MAX_AGE]

    def ratio(self, batch_size: int, now: int | None = None) -> float | None:
        """Served k = 1 cost over plain for `batch_size` requests, or None while fewer than MIN_SAMPLES. Kept until a
        sample arrives or the oldest one ages out (asked twice per planned batch)."""
        now = self.last_round if now is None else now
        cached = self._ratios.get(batch_size)
        if now is not None and cached is not None and cached[0] == self._appended and cached[1] <= now <= cached[2]:
            return cached[3]
        kept = self._kept(batch_size, now)
        value = statistics.median(x for _, x in kept) if len(kept) >= MIN_SAMPLES else None
        if now is not None:  # valid from this round until a sample arrives or the oldest kept one ages out
            self._ratios[batch_size] = (self._appended, now, min(r for r, _ in kept) + MAX_AGE if kept else float("inf"),
                                        value)
        return value


class ServedPricing:
    """The draft step controller's served pricing and cost checks; needs the controller's `policy` and `window`."""

    def _init_served(self) -> None:
        self.served = ServedRatio()
        self._timed = False  # observe_round was called: the engine reports round times
        self.cost_checks = 0
        self.last_check = False  # whether the batch plan() returned last is a cost check
        self._since_check = 0  # batches planned at k = 1 since the last cost check
        self._check_every = CHECK_MIN_EVERY  # ... before the next one while the ratio is unknown (check_interval)
        self._since_zero_check = 0  # batches planned at k = 0 since the last run of k = 1 cost checks
        self._run_left = 0  # k = 1 batches left in the current run of cost checks at k = 0
        self._served_tables: dict[int, tuple[dict, float, dict]] = {}
        self._table_ratios: dict[int, float] = {}  # per request count priced by its own ratio: its table's k1 / k0

    def observe_round(self, round_id: int, batch_size: int, k: int, ms: float, pure: bool) -> None:
        """A completed round's time as served (ms; `pure`: decode only, every request drafted and verified k)."""
        if self.policy.served_costs:
            self._timed = True
            self.served.record(round_id, batch_size, k, ms, pure)

    def _served_table(self, batch_size: int, table: dict[int, float], round_id: int | None) -> dict[int, float]:
        """`table` with k = 1 at the served ratio, deeper k no cheaper (module docstring); `table` itself
        without one. The result is cached, so that the same price is the same object (the controller re-scores
        when the table object changes)."""
        if not self._timed or 0 not in table or 1 not in table:
            return table
        rho = self._served_rho(batch_size, table, round_id)
        if rho is None:
            return table
        cached = self._served_tables.get(batch_size)
        if cached is not None and cached[0] is table and cached[1] == rho:
            return cached[2]
        priced = dict(table)
        priced[1] = rho * table[0]
        for k in sorted(k for k in table if k > 1):
            priced[k] = max(table[k], priced[k - 1]) if k - 1 in priced else table[k]
        self._served_tables[batch_size] = (table, rho, priced)
        return priced

    def _served_rho(self, batch_size: int, table: dict[int, float], round_id: int | None) -> float | None:
        """k = 1's served cost over plain for `batch_size` requests priced at `table`: its own ratio once known;
        before that, with policy.served_transfer, the correction of the nearest request count in the same request
        bucket (its own ratio over its table's k = 1 / plain, the larger count on a tie) times `table`'s k = 1 / plain
        (module docstring)."""
        rho = self.served.ratio(batch_size, round_id)
        if rho is not None:
            self._table_ratios[batch_size] = table[1] / table[0]
            return rho
        if not self.policy.served_transfer or not self._table_ratios:
            return None
        bucket = self.pad_requests(batch_size)
        known = {b: r for b in self._table_ratios
                 if self.pad_requests(b) == bucket and (r := self.served.ratio(b, round_id)) is not None}
        if not known:
            return None
        nearest = min(known, key=lambda b: (abs(b - batch_size), -b))
        return known[nearest] / self._table_ratios[nearest] * table[1] / table[0]

    def _cost_check(self, batch_size: int, k: int, table: dict[int, float], can_verify: bool,
                    round_id: int | None) -> bool:
        """Whether this batch, planned at k, runs at k = 0 to time a plain round next to k = 1 ones."""
        if not self._timed or k != 1 or 0 not in table:
            return False
        self._since_check += 1
        known = self.served.ratio(batch_size, round_id) is not None
        if not can_verify or self._since_check < (CHECK_EVERY_KNOWN if known else self._check_every):
            return False
        # judged now, marginal or not: the next look is an interval away (a k = 1 far from the margin was otherwise
        # re-judged every batch, each an acceptance estimate: a fifth of the controller's time at code B = 1)
        self._since_check = 0
        gain = k1_gain(self.window.prefix_acceptance()[0], table)
        self._check_every = check_interval(gain)
        if gain >= CHECK_MARGIN:
            return False
        self.cost_checks += 1
        return True

    def _zero_cost_check(self, batch_size: int, k: int, table: dict[int, float], can_verify: bool,
                         round_id: int | None) -> bool:
        """Whether this batch, planned at k = 0, runs at k = 1 to time k = 1 next to plain rounds (a run of CHECK_RUN
        batches; module docstring)."""
        if not self._timed or k != 0 or 0 not in table or 1 not in table or not can_verify:
            self._run_left = 0  # a run is consecutive rounds, or it times nothing
            return False
        if self._run_left:
            self._run_left -= 1
            self.cost_checks += 1
            return True
        if self.served.ratio(batch_size, round_id) is not None:
            return False
        self._since_zero_check += 1
        if self._since_zero_check < CHECK_EVERY:
            return False
        self._since_zero_check = 0
        a1 = self.window.prefix_acceptance(self.policy.zero_confidence)[0]  # the bound that leaves k = 0
        if k1_gain(a1, table) <= -CHECK_MARGIN / batch_size:
            return False  # k = 1 loses by more than a run may explore at this batch (module docstring)
        self.cost_checks += 1
        self._run_left = CHECK_RUN - 1
        return True

    def describe_served(self, off: str | None = None) -> str:
        """The start-up log line; `off`: why the engine reports no round times to this controller."""
        if off is None and not self.policy.served_costs:
            off = "policy.served_costs"
        if off is not None:
            return f"[adaspec] served pricing: off ({off}); the cost table alone prices speculation"
        transfer = ("; a request count not yet priced takes the correction of the nearest priced count in its request "
                    "bucket (policy.served_transfer)" if self.policy.served_transfer else "")
        return (f"[adaspec] served pricing: k = 1 is priced from served round times once {MIN_SAMPLES} plain rounds "
                f"have been timed next to k = 1 ones at the batch's request count; while k = 1 gains less than "
                f"{100 * CHECK_MARGIN:.0f}% over plain, one batch in {CHECK_MIN_EVERY}-{CHECK_EVERY} (in proportion "
                f"to its predicted gain; {CHECK_EVERY_KNOWN} once priced) runs plain to time it, and at k = 0, while "
                f"unpriced and within "
                f"{100 * CHECK_MARGIN:.0f}% / B of plain, one in {CHECK_EVERY} starts {CHECK_RUN} k = 1 batches in a "
                f"row (cost checks){transfer}")
