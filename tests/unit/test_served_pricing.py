"""The draft step's served pricing (adaptive/step_served.py, adaspec's extension of R-C3, issue 13): k = 1 priced from
the ratio of its served round times to plain rounds timed next to it, and the cost checks that time it."""

from __future__ import annotations

import statistics

import pytest

from adaspec.adaptive import step_served
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy
from adaspec.adaptive.step_served import MIN_SAMPLES, ServedRatio, served_kind
from adaspec.calibration.schema import DraftStepPolicy


def _record(served: ServedRatio, kinds: str, ms: dict, start: int = 1, batch_size: int = 4, drift=lambda r: 1.0):
    """Record rounds start.. of the given kinds ('0' plain, '1' k = 1, 'c' the k = 1 round that catches up after a
    plain one, 'p' an impure plain round), ms[kind] each, times drift(round id)."""
    for i, kind in enumerate(kinds):
        r = start + i
        k = 0 if kind in "0p" else 1
        served.record(r, batch_size, k, ms[kind] * drift(r), pure=kind != "p")
    return start + len(kinds)


MS = {"0": 10.0, "1": 13.0, "c": 40.0, "p": 30.0}


def test_a_plain_round_between_steady_k1_rounds_gives_their_ratio():
    """Each plain round with k = 1 neighbours gives median(neighbours) / its time; the k = 1 round right after a plain
    one (it catches up on the deferred draft context) is no neighbour, nor is an impure round a sample."""
    served = ServedRatio()
    nxt = _record(served, "1" * 8 + "0c" + "1" * 8, MS)
    assert served.samples(4) == [pytest.approx(1.3)]
    assert served.ratio(4) is None  # fewer than MIN_SAMPLES
    _record(served, "p" + "1" * 8, MS, start=nxt)
    assert len(served.samples(4)) == 1
    assert served.samples(2) == []  # per request count


def test_the_ratio_is_a_median_robust_to_a_drifting_machine():
    """Neighbours on both sides cancel a slow drift (the machine slowing by half over the run), and the median of
    the samples ignores one plain round that the machine interrupted."""
    served = ServedRatio()
    drift = lambda r: 1.0 + r / 400  # noqa: E731
    nxt = 1
    for i in range(MIN_SAMPLES + 2):
        ms = dict(MS, **({"0": 30.0} if i == 3 else {}))  # one plain round slowed 3x
        nxt = _record(served, "1" * 8 + "0c", ms, start=nxt, drift=drift)
    _record(served, "1" * 8, MS, start=nxt, drift=drift)
    assert served.ratio(4) == pytest.approx(1.3, rel=0.02)


def test_samples_age_out():
    served = ServedRatio()
    nxt = 1
    for _ in range(MIN_SAMPLES):
        nxt = _record(served, "1" * 8 + "0c", MS, start=nxt)
    nxt = _record(served, "1" * 8, MS, start=nxt)
    assert served.ratio(4) == pytest.approx(1.3)
    assert served.ratio(4, now=nxt + step_served.MAX_AGE) is None


def table_cost(table):
    return lambda bcap, k: table.get(k)


def pad_requests(B):
    return next((b for b in (1, 2, 4, 8) if b >= B), None)


def _serve(ctrl: DraftStepController, rounds: int, served_ratio: float | None, accept_every: int = 3,
           batch_size: int = 4) -> list[int]:
    """An engine loop: plan, one accepted draft in `accept_every`, and (unless served_ratio is None) the round's time
    as served: plain 10 ms, k = 1 10 * served_ratio ms (the round after a plain one 2 ms more)."""
    ks, previous = [], None
    for r in range(1, rounds + 1):
        k = ctrl.plan(batch_size, round_id=r, requests=list(range(batch_size)))
        ks.append(k)
        lens = [k] * batch_size
        acc = [min(k, 1) if (r * batch_size + i) % accept_every == 0 else 0 for i in range(batch_size)]
        ctrl.observe(lens, acc, round_id=r)
        if served_ratio is not None:
            ms = 10.0 if k == 0 else 10.0 * served_ratio + (2.0 if previous == 0 else 0.0)
            ctrl.observe_round(r, batch_size, k, ms, pure=True)
        previous = k
    return ks


def _controller(**policy) -> DraftStepController:
    # the table prices k = 1 at 1.2x plain: with a third of the drafts accepted it gains 11% on the table
    return DraftStepController(1, StepPolicy(**policy), table_cost({0: 1.0, 1: 1.2}), pad_requests,
                               cold_start="k_max", probe_interval=20)


def test_a_k1_that_the_table_favours_and_the_served_rounds_price_at_a_loss_goes_to_plain():
    """Issue 13's marginal cells: the table says k = 1 gains 11%, the served rounds cost 1.45x plain (k = 1 loses
    8%). The cost checks time plain rounds inside the k = 1 stretch, and once the ratio is known the re-score leaves
    k = 1 for plain; without round times (the table alone) k = 1 is kept for the whole run."""
    ctrl = _controller()
    ks = _serve(ctrl, 600, served_ratio=1.45)
    checks = [d for d in ctrl.decisions if d.reason == "cost check"]
    assert ctrl.cost_checks == len(checks) >= MIN_SAMPLES
    assert ctrl.served.ratio(4) == pytest.approx(1.45)
    assert any(d.reason in ("switch", "floor") and d.previous_k == 1 and d.k == 0 for d in ctrl.decisions)
    assert ks[-300:].count(0) > 0.8 * 300  # plain, but for probes and looks

    table_only = _controller()
    assert _serve(table_only, 600, served_ratio=None) == [1] * 600
    assert table_only.cost_checks == 0 and table_only.served.ratio(4) is None


def test_the_check_interval_follows_the_predicted_gain():
    """A check costs about k = 1's predicted gain of one batch: CHECK_EVERY near the margin, CHECK_MIN_EVERY near no
    gain or a loss, in between in proportion (stop 56)."""
    check_interval = step_served.check_interval
    assert check_interval(step_served.CHECK_MARGIN) == step_served.CHECK_EVERY == check_interval(0.9)
    assert check_interval(0.0) == step_served.CHECK_MIN_EVERY == check_interval(-0.3)
    assert check_interval(0.1) == 8
    assert all(check_interval(g / 100) <= check_interval((g + 1) / 100) for g in range(-5, 30))


def test_a_barely_favoured_k1_that_loses_as_served_is_priced_and_left_within_a_few_dozen_batches():
    """The table says k = 1 gains 11% (1 + 1/3 over 1.2), the served rounds cost 1.45x plain: a plain check every
    ~9 batches (not 16) gathers the MIN_SAMPLES samples, and k = 1 is left for plain within ~60 batches (stop 56:
    a chat B = 4 table 13% under the served price kept k = 1 for 90 of 226 batches at one check in 16)."""
    ctrl = _controller()
    ks = _serve(ctrl, 600, served_ratio=1.45)
    left = next(d.completed for d in ctrl.decisions if d.previous_k == 1 and d.k == 0 and d.reason != "cost check")
    assert left <= 60
    assert ks[:left].count(0) >= MIN_SAMPLES


def test_a_k1_that_the_served_rounds_confirm_is_kept_and_checked_less_often():
    """Served at 1.15x plain, k = 1 gains 16%: kept, and once priced one batch in CHECK_EVERY_KNOWN is checked."""
    ctrl = _controller()
    ks = _serve(ctrl, 800, served_ratio=1.15)
    assert ctrl.served.ratio(4) == pytest.approx(1.15)
    assert ctrl.k == 1 and not any(d.reason == "floor" for d in ctrl.decisions)
    late = ks[400:]
    assert 0 < late.count(0) <= len(late) // step_served.CHECK_EVERY_KNOWN + 1


def test_a_k1_far_from_the_margin_is_never_checked():
    """Every accepted draft: k = 1 gains 67% on the table, beyond CHECK_MARGIN: no batch runs plain to time it."""
    ctrl = _controller()
    assert _serve(ctrl, 300, served_ratio=1.3, accept_every=1) == [1] * 300
    assert ctrl.cost_checks == 0


def test_served_costs_off_ignores_round_times():
    ctrl = _controller(served_costs=False)
    assert _serve(ctrl, 300, served_ratio=1.45) == [1] * 300
    assert ctrl.cost_checks == 0 and ctrl.served.ratio(4) is None
    assert "off" in ctrl.describe_served()
    assert DraftStepPolicy(served_costs=False).served_costs is False


def _timed_at(ctrl: DraftStepController, counts: dict[int, float], start: int = 1, samples: int = MIN_SAMPLES) -> int:
    """Give `ctrl` `samples` served samples per request count (plain 10 ms, k = 1 at ratio x 10 ms, each plain round
    between steady k = 1 rounds), one count after the other from round `start`; returns the next round id."""
    ctrl._timed = True
    nxt = start
    for b, ratio in counts.items():
        ms = {"0": 10.0, "1": 10.0 * ratio, "c": 10.0 * ratio + 5.0}
        for _ in range(samples):
            nxt = _record(ctrl.served, "1" * 8 + "0c", ms, start=nxt, batch_size=b)
        nxt = _record(ctrl.served, "1" * 8, ms, start=nxt, batch_size=b)
    return nxt


def test_k1_is_priced_at_the_served_ratio_and_deeper_k_no_cheaper():
    """k = 1 costs the served ratio times the table's plain round; k >= 2 keep the table's price unless k = 1 now
    costs more (no round measured them); the same price is the same object (a new one re-scores the batch)."""
    ctrl = DraftStepController(3, StepPolicy(), table_cost({0: 1.0, 1: 1.2, 2: 1.3, 3: 1.6}), pad_requests,
                               cold_start="k_max")
    table = {0: 1.0, 1: 1.2, 2: 1.3, 3: 1.6}
    assert ctrl._served_table(4, table, None) is table  # no round times: the table
    _timed_at(ctrl, {4: 1.45})
    priced = ctrl._served_table(4, table, None)
    assert priced == pytest.approx({0: 1.0, 1: 1.45, 2: 1.45, 3: 1.6})
    assert ctrl._served_table(4, table, None) is priced
    assert ctrl._served_table(2, table, None) is table  # another request bucket's count: not timed
    # a count of the same bucket, not timed itself: at count 4's correction (served_transfer, the tests below)
    assert ctrl._served_table(3, table, None) == pytest.approx(priced)
    off = DraftStepController(3, StepPolicy(served_transfer=False), table_cost(table), pad_requests, cold_start="k_max")
    off.served, off._timed = ctrl.served, True
    assert off._served_table(4, table, None) == pytest.approx(priced)
    assert off._served_table(3, table, None) is table  # without the transfer: the table until its own is known
    assert DraftStepPolicy(served_transfer=False).served_transfer is False  # the config file's field


def test_a_request_count_without_its_own_ratio_is_priced_at_its_buckets_nearest_correction():
    """A closed batch's tail (3 requests after 4) or a stream whose request count moves has few plain rounds next to
    k = 1 ones at most counts: the table's error measured at one count (its served ratio over the table's k = 1 /
    plain) corrects the other counts of the same request bucket (whose points were calibrated together) until their
    own ratio is known: the nearest, the larger on a tie; another bucket's is not carried; it ages out with its
    samples; a count's own ratio always wins."""
    t4, t8, t3 = {0: 1.0, 1: 1.2, 2: 1.5}, {0: 2.0, 1: 2.8, 2: 3.6}, {0: 0.9, 1: 1.0, 2: 1.3}
    ctrl = DraftStepController(2, StepPolicy(), table_cost(t4), pad_requests, cold_start="k_max")
    now = _timed_at(ctrl, {4: 1.5, 8: 1.7})
    assert ctrl._served_table(3, t3, now) is t3  # no count priced by its own ratio yet: nothing to carry
    assert ctrl._served_table(4, t4, now)[1] == pytest.approx(1.5)  # correction 1.5 / 1.2 = 1.25
    assert ctrl._served_table(8, t8, now)[1] == pytest.approx(3.4)  # correction 1.7 / 1.4
    assert ctrl._served_table(3, t3, now) == pytest.approx({0: 0.9, 1: 1.25, 2: 1.3})  # 4's, its bucket's
    assert ctrl._served_table(6, t3, now)[1] == pytest.approx(1.0 * 1.7 / 1.4)  # 8's
    assert ctrl._served_table(2, t3, now) is t3  # bucket 2 has no priced count: 4's correction is not carried
    # count 4's rounds now cost 1.8x plain: the carried correction follows
    later = _timed_at(ctrl, {4: 1.8}, start=now, samples=step_served.SAMPLES)
    assert ctrl._served_table(3, t3, later)[1] == pytest.approx(1.0 * 1.8 / 1.2)
    assert ctrl._served_table(3, t3, later + step_served.MAX_AGE + 200) is t3  # aged out with the samples
    tie = DraftStepController(2, StepPolicy(), table_cost(t8), pad_requests, cold_start="k_max")
    now = _timed_at(tie, {5: 1.5, 7: 1.7})
    tie._served_table(5, t8, now), tie._served_table(7, t8, now)
    assert tie._served_table(6, t3, now)[1] == pytest.approx(1.0 * 1.7 / 1.4)  # a tie: the larger count
    own = DraftStepController(2, StepPolicy(), table_cost(t4), pad_requests, cold_start="k_max")
    now = _timed_at(own, {4: 1.5, 3: 1.2})
    own._served_table(4, t4, now)
    assert own._served_table(3, t3, now)[1] == pytest.approx(0.9 * 1.2)  # its own ratio, not 4's correction


def test_a_closed_batch_is_scored_at_served_prices_in_every_phase():
    """The closed score (closed_step.py) prices the batch's first phase at the served price the per-round score uses,
    and its later phases (fewer requests) at theirs: here k = 1 is served at 1.5x plain where the table says 1.2x, so
    with a third of the drafts accepted k = 1 loses in the closed score as it does per round (before, the closed
    score re-read every phase from the table and predicted a gain)."""
    t4 = {0: 1.0, 1: 1.2}
    ctrl = DraftStepController(1, StepPolicy(), table_cost(t4), pad_requests, cold_start="k_max")
    now = _timed_at(ctrl, {4: 1.5})
    served = ctrl._served_table(4, t4, now)
    ctrl._round_id, ctrl._closed, ctrl._depth_view = now, [(100, 1.0), (100, 1.0), (100, 1.0), (50, 1.0)], None
    a = [1.0 / 3.0]
    closed = {k: ctrl.throughput(4, a, k, served) for k in (0, 1)}
    # by hand: at k = 1 every request advances 4/3 tokens a round; one finishes after 37.5 rounds, three after 75;
    # the three run at the 4-request bucket's table carried to 3 requests (1.2 x 1.25); plain: 100 rounds at 1.0
    assert closed[1] == pytest.approx(350 / (37.5 * 1.5 + 37.5 * 1.2 * 1.25))
    assert closed[0] == pytest.approx(350 / 100) and closed[1] < closed[0]
    ctrl._closed, ctrl._depth_view = None, None
    assert ctrl.throughput(4, a, 1, served) < ctrl.throughput(4, a, 0, served)  # the per-round score agrees


def test_a_new_served_price_rescores_without_resetting_the_exploration_backoff():
    """A new ratio re-prices the batch at once (as a new request count does), but the exploration backoff, learnt on
    this request count's looks, is kept: samples arrive with every look, and resetting it each time would undo it."""
    ctrl = _controller()
    _serve(ctrl, 600, served_ratio=1.45)
    assert ctrl.k == 0 and ctrl.served.ratio(4) == pytest.approx(1.45)
    ctrl.backoff = 4
    nxt = _timed_at(ctrl, {4: 2.0}, start=601)  # the machine changed: k = 1 now costs 2x plain
    assert ctrl.served.ratio(4) == pytest.approx(2.0)
    n = len(ctrl.decisions)
    ctrl.plan(4, round_id=nxt, requests=list(range(4)))
    d = ctrl.decisions[-1]
    assert len(ctrl.decisions) == n + 1 and d.predicted[1] == pytest.approx(d.predicted[0] * 1.35 / 2.0, rel=0.05)
    assert ctrl.backoff == 4


def test_the_served_ratio_cache_follows_new_samples_and_their_age():
    """ServedRatio.ratio is kept between samples (asked twice per batch) but equals a fresh median of the samples no
    older than MAX_AGE at every round: a new sample changes it at once, and the oldest ageing out drops it."""
    served = ServedRatio()
    rid = 0
    for i in range(MIN_SAMPLES):  # a plain round amid k = 1 rounds, each served at 1.2 + i / 10 times plain
        for k in (1, 1, 1, 0, 1, 1, 1):
            rid += 1
            served.record(rid, 4, k, 10.0 if k == 0 else 10.0 * (1.2 + i / 10), pure=True)
    for _ in range(step_served.NEIGHBOURS):  # the last plain round's right-hand neighbours
        rid += 1
        served.record(rid, 4, 1, 10.0 * (1.2 + (MIN_SAMPLES - 1) / 10), pure=True)

    def fresh(now):
        s = served.samples(4, now)
        return statistics.median(s) if len(s) >= MIN_SAMPLES else None

    assert len(served.samples(4)) == MIN_SAMPLES and served.ratio(4) == pytest.approx(fresh(rid))
    first = min(r for r, _ in served._samples[4])
    for now in (rid, rid + 1, first + step_served.MAX_AGE, first + step_served.MAX_AGE + 1):
        assert served.ratio(4, now) == fresh(now)
    assert served.ratio(4, first + step_served.MAX_AGE + 1) is None  # one sample aged out: too few
    assert served.ratio(4, rid) == fresh(rid) is not None  # asked at an earlier round again


@pytest.mark.parametrize("plan, lens, decode_only, expected", [
    ((1, (1,), 0.6, False, False), [1], True, (1, True)),  # a k = 1 round
    ((0, (0, 0), 0.6, False, False), [0, 0], True, (0, True)),  # a plain round
    ((3, (3, 3), 0.6, False, False), [1, 1], True, (1, True)),  # every request stopped at step 1: a k = 1 round
    ((3, (3, 3), 0.6, False, False), [2, 2], True, (2, True)),
    ((3, (3, 3), 0.6, False, False), [1, 2], True, (3, False)),  # depths differ: the draft ran 2 steps, rows vary
    ((3, (3, 1), 0.6, False, False), [1, 1], True, (3, False)),  # a cap, not the stop, may have ended one
    ((3, (3,), 0.0, False, False), [1], True, (3, False)),  # no confidence stop: something else cut it
    ((1, (1,), 0.6, False, False), [1], False, (1, False)),  # a prefill chunk in the round
    ((3, (3,), 0.6, True, False), [1], True, (1, False)),  # a probe
    ((3, (3, 3), 0.6, False, True), [1, 0], True, (3, False)),  # a draft-only subset
])
def test_a_round_is_priced_at_the_depth_it_was_served(plan, lens, decode_only, expected):
    """served_kind (the engine passes the stop with policy.ceiling_pricing and in greedy-ceiling rounds): a round whose
    every request the stop ended at the same step d < k drafted d steps and verified d + 1 rows each, so it is a served
    sample of k = d; anything else keeps its plan's k, pure only when every request verified exactly k."""
    k, caps, stop, probe, subset = plan
    assert served_kind(k, caps, lens, stop, decode_only, probe, subset) == expected


def _plain_start(table1: float, **policy) -> DraftStepController:
    # the prior (0.5 per position) against the table's k = 1 at table1 x plain: k = 0 from the first batch
    return DraftStepController(1, StepPolicy(**policy), table_cost({0: 1.0, 1: table1}), pad_requests,
                               probe_interval=20)


def test_a_table_that_overprices_k1_is_corrected_from_k0_by_a_run_of_k1_checks():
    """Issue 13 (stop 53's busy start-up): the table prices k = 1 at 1.6x plain, so at half the drafts accepted (k = 1
    predicted 6% below plain) the controller starts and stays plain, and no k = 1 round is ever timed. Served at 1.17x
    plain, k = 1 gains 28%. One batch in CHECK_EVERY at k = 0 starts CHECK_RUN k = 1 batches in a row (cost checks,
    never at the greedy ceiling); their plain neighbours price k = 1, the controller leaves plain, and the runs stop
    once priced."""
    ctrl = _plain_start(1.6)
    ks = _serve(ctrl, 400, served_ratio=1.17, accept_every=2)
    runs = [d for d in ctrl.decisions if d.reason == "cost check" and d.previous_k == 0 and d.k == 1]
    assert len(runs) == step_served.CHECK_RUN  # one run priced it
    assert [d.completed for d in runs] == list(range(runs[0].completed, runs[0].completed + step_served.CHECK_RUN))
    assert runs[0].completed <= step_served.CHECK_EVERY + 2
    assert ctrl.served.ratio(4) == pytest.approx(1.17)
    assert ks[100:].count(1) > 0.9 * 300 and ctrl.k == 1

    without = _plain_start(1.6)  # the same without round times: the table alone keeps it plain
    assert _serve(without, 400, served_ratio=None, accept_every=2)[100:].count(0) > 0.95 * 300
    assert without.cost_checks == 0


def test_a_k1_that_really_loses_is_timed_once_and_left_plain():
    """Served at 1.7x plain (the table was right, or optimistic): one run prices it, the controller stays plain and
    no further run comes (the ratio is known); the runs cost CHECK_RUN batches."""
    ctrl = _plain_start(1.6)
    ks = _serve(ctrl, 400, served_ratio=1.7, accept_every=2)
    assert ctrl.served.ratio(4) == pytest.approx(1.7)
    assert ctrl.cost_checks == step_served.CHECK_RUN
    assert ks[50:].count(0) > 0.95 * 350 and ctrl.k == 0


def test_no_run_where_k1_loses_beyond_the_margin():
    """One draft in ten accepted: at the table's 1.6x, k = 1 loses over 20% even at the optimistic bound, so no batch is
    spent timing it (a 20% error of the table would not change the verdict); and the margin shrinks with the batch
    (CHECK_MARGIN / B: a run costs every request its deferred draft context): at half the drafts accepted, k = 1
    predicted ~6% below plain, a batch of one runs it, a batch of four does not."""
    ctrl = _plain_start(1.6)
    assert _serve(ctrl, 300, served_ratio=1.17, accept_every=10)[1:].count(1) <= 300 // 20 + 1  # the probes only
    assert ctrl.cost_checks == 0 and ctrl.served.ratio(4) is None
    table = {0: 1.0, 1: 1.6}
    for B, runs in ((1, True), (4, False)):
        ctrl = _plain_start(1.6)
        for _ in range(50):  # 200 drafts at one in two accepted: the bound is close to 0.5
            ctrl.observe([1] * 4, [1, 0, 1, 0])
        ctrl._timed, ctrl._since_zero_check = True, step_served.CHECK_EVERY - 1
        assert ctrl._zero_cost_check(B, 0, table, True, None) is runs


def test_a_run_is_consecutive_and_off_without_round_times_or_served_costs():
    """A batch that cannot verify a draft ends the run (its rounds would not be steady neighbours); with
    policy.served_costs off no run starts (without round times neither: the first test's table-only controller)."""
    ctrl = _plain_start(1.6)
    rid, ks = 0, []
    for _ in range(40):
        rid += 1
        ks.append(ctrl.plan(4, round_id=rid, requests=[0, 1, 2, 3]))
        ctrl.observe([ks[-1]] * 4, [min(ks[-1], 1)] * 2 + [0, 0], round_id=rid)
        ctrl.observe_round(rid, 4, ks[-1], 10.0 if ks[-1] == 0 else 11.7, pure=True)
        if ctrl.last_check and ks[-1] == 1:
            rid += 1
            assert ctrl.plan(4, round_id=rid, requests=[0, 1, 2, 3], can_verify=False) == 0
            assert not ctrl.last_check and ctrl._run_left == 0
            break
    else:
        pytest.fail("no run started")
    off = _plain_start(1.6, served_costs=False)
    _serve(off, 200, served_ratio=1.17, accept_every=2)
    assert off.cost_checks == 0 and off.served.ratio(4) is None
