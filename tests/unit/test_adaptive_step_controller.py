"""Adaptive MTP draft step (R-C1, R-C2, plus k = 0): hand-computed optima and the exact policy rules."""

from __future__ import annotations

import math

import pytest

from adaspec.adaptive.step_controller import DraftStepController, StepPolicy, best_step, step_throughput


def pad_requests(B: int) -> int | None:
    for b in (1, 2, 4, 8, 16):
        if b >= B:
            return b
    return None


def table_cost(table: dict[int, float | None]):
    return lambda bcap, k: table.get(k)


def test_best_step_hand_computed():
    """R-C1: argmax_k B (1 + sum a[:k]) / cost(k)."""
    a = [0.8, 0.6, 0.3]
    costs = {0: 10.0, 1: 12.0, 2: 15.0, 3: 20.0}
    k, pred = best_step(4, a, costs)
    # k=0: 4/10 = 0.4; k=1: 4*1.8/12 = 0.6; k=2: 4*2.4/15 = 0.64; k=3: 4*2.7/20 = 0.54
    assert k == 2
    assert pred == pytest.approx({0: 0.4, 1: 0.6, 2: 0.64, 3: 0.54})


def test_k_zero_when_speculation_cannot_pay():
    a = [0.1, 0.01]
    costs = {0: 10.0, 1: 15.0, 2: 20.0}
    k, pred = best_step(1, a, costs)  # 0.1 vs 1.1/15 = 0.073 vs 1.11/20
    assert k == 0
    k, pred = best_step(1, a, costs, allow_zero=False)
    assert k == 1 and 0 not in pred


def test_candidates_are_exactly_the_table_and_ties_go_to_smaller_k():
    k, pred = best_step(2, [0.5, 0.5], {1: 1.5, 2: 2.0})  # 2*1.5/1.5 = 2 = 2*2/2
    assert k == 1 and set(pred) == {1, 2}
    with pytest.raises(ValueError):
        best_step(2, [0.5], {2: 1.0})


def feed(ctrl: DraftStepController, n: int, lens, acc, start_round: int | None = None):
    for i in range(n):
        ctrl.observe(lens, acc, None if start_round is None else start_round + i)


def test_starts_at_k_max_and_rescores_only_every_update_interval_completed_batches():
    """R-C2: re-score every update_interval completed batches; plan() calls are not counted."""
    ctrl = DraftStepController(3, StepPolicy(window_size=20, update_interval=5, switch_min_gain=0.05),
                               table_cost({1: 1.0, 2: 2.0, 3: 3.0}), pad_requests, cold_start="k_max")
    assert ctrl.plan(4) == 3
    feed(ctrl, 4, [3, 3, 3, 3], [0, 0, 0, 0])  # nothing accepted: k = 1 is far better
    for _ in range(20):
        assert ctrl.plan(4) == 3  # 4 completed batches: no re-score, however often we plan
    feed(ctrl, 1, [3, 3, 3, 3], [0, 0, 0, 0])
    assert ctrl.plan(4) == 1  # 5th completed batch: re-scored, 4/1 vs 4/3
    assert ctrl.decisions[-1].reason == "switch" and ctrl.decisions[-1].previous_k == 3
    # now everything is accepted, but the next re-score is only at 10 completed batches
    feed(ctrl, 4, [1, 1, 1, 1], [1, 1, 1, 1])
    assert ctrl.plan(4) == 1
    feed(ctrl, 1, [1, 1, 1, 1], [1, 1, 1, 1])
    # window: 5 batches rejecting at position 1, 5 accepting -> alpha_1 = 1/2, carried forward;
    # k=1: 4*1.5/1 = 6, k=2: 4*1.75/2 = 3.5, k=3: 4*1.875/3 = 2.5 -> keep k = 1
    assert ctrl.plan(4) == 1
    assert ctrl.completed == 10  # results are taken in at plan() time (where the lag is applied)
    assert ctrl.decisions[-1].reason == "keep"
    assert ctrl.decisions[-1].predicted == pytest.approx({1: 6.0, 2: 3.5, 3: 2.5})


def test_only_the_last_window_size_batches_count_in_the_controller():
    """R-C2: the window is the last window_size completed batches."""
    ctrl = DraftStepController(2, StepPolicy(window_size=5, update_interval=5, switch_min_gain=0.05),
                               table_cost({1: 1.0, 2: 1.4}), pad_requests)
    feed(ctrl, 5, [2], [0])  # position 1 rejected
    assert ctrl.plan(1) == 1  # 1.0/1 vs 1.0/1.4
    feed(ctrl, 5, [1], [1])  # the old batches leave the window: alpha = 1 everywhere
    assert ctrl.plan(1) == 2  # k=1: 2/1 = 2, k=2: 3/1.4 = 2.14, gain 7% > 5%
    assert ctrl.window.batches_in_window == 5


def _gain_policy_controller(c1: float) -> DraftStepController:
    ctrl = DraftStepController(2, StepPolicy(window_size=20, update_interval=5, switch_min_gain=0.05),
                               table_cost({1: c1, 2: 1.25}), pad_requests, cold_start="k_max")
    # 16 drafts per batch verifying 2 positions: n_1 = 5, n_2 = 4 -> a = (5/16, 1/4) exactly
    feed(ctrl, 5, [2] * 16, [2, 2, 2, 2, 1] + [0] * 11)
    return ctrl


def test_gain_exactly_switch_min_gain_does_not_switch():
    """R-C2: switch only if the predicted relative gain is STRICTLY greater than switch_min_gain."""
    # current k=2: 16 * 1.5625 / 1.25 = 20; k=1: 16 * 1.3125 / 1.0 = 21; gain = 1/20 = 0.05 exactly
    a = [5 / 16, 1 / 4]
    th2, th1 = step_throughput(16, a, 2, 1.25), step_throughput(16, a, 1, 1.0)
    assert (th2, th1) == (20.0, 21.0) and (th1 - th2) / th2 == 0.05
    ctrl = _gain_policy_controller(1.0)
    assert ctrl.plan(16) == 2
    d = ctrl.decisions[-1]
    assert d.reason == "keep" and d.gain == 0.05 and d.predicted == {1: 21.0, 2: 20.0}


def test_gain_just_above_switch_min_gain_switches():
    ctrl = _gain_policy_controller(math.nextafter(1.0, 0.0))  # k=1 a hair cheaper
    assert ctrl.plan(16) == 1
    assert ctrl.decisions[-1].gain > 0.05 and ctrl.decisions[-1].reason == "switch"


def test_controller_chooses_k_zero_and_probes():
    # explore_overhead 0.5: k = 1's 50% over plain is explored at the base rate (scaling: below)
    ctrl = DraftStepController(2, StepPolicy(window_size=20, update_interval=5, switch_min_gain=0.05,
                                             explore_overhead=0.5),
                               table_cost({0: 1.0, 1: 1.5, 2: 2.0}), pad_requests, probe_interval=10)
    feed(ctrl, 5, [2, 2], [0, 0])
    assert ctrl.plan(2) == 0  # plain decode: 2/1 vs 2/1.5 vs 2/2
    feed(ctrl, 9, [0, 0], [0, 0])  # k = 0 rounds carry no drafts
    assert ctrl.plan(2) == 0
    feed(ctrl, 1, [0, 0], [0, 0])  # 10 completed batches at k = 0: one probe at the best k >= 1 (here 1)
    assert ctrl.plan(2) == 1 and ctrl.decisions[-1].reason == "probe"
    assert ctrl.plan(2) == 0  # the probe is one batch
    assert ctrl.k_histogram[0] >= 2 and ctrl.k_histogram[1] >= 1


def test_k_zero_needs_allow_zero_and_a_plain_cost():
    ctrl = DraftStepController(2, StepPolicy(update_interval=1), table_cost({0: 1.0, 1: 1.5, 2: 2.0}),
                               pad_requests, allow_zero=False)
    feed(ctrl, 1, [2], [0])
    assert ctrl.plan(1) == 1
    ctrl = DraftStepController(2, StepPolicy(update_interval=1), table_cost({1: 1.5, 2: 2.0}), pad_requests)
    feed(ctrl, 1, [2], [0])
    assert ctrl.plan(1) == 1  # no k = 0 in the table


def test_uncovered_cost_falls_back_to_k_max_and_says_so():
    def cost(bcap, k):
        return None if bcap == 16 else {1: 1.0, 2: 2.0, 3: 3.0}.get(k)

    ctrl = DraftStepController(3, StepPolicy(update_interval=1), cost, pad_requests)
    feed(ctrl, 1, [3], [0])
    assert ctrl.plan(3) == 1
    assert ctrl.plan(9) == 3  # bcap 16 not calibrated
    assert ctrl.decisions[-1].reason.startswith("fallback: cost not covered at bcap=16")
    assert ctrl.plan(3) == 1  # covered batches keep the controller's k
    assert ctrl.plan(40) == 3  # no request bucket at all
    assert "fallback" in ctrl.decisions[-1].reason


def test_no_rescore_on_the_prior_alone():
    ctrl = DraftStepController(2, StepPolicy(update_interval=1), table_cost({0: 1.0, 1: 5.0, 2: 9.0}), pad_requests,
                               cold_start="k_max")
    feed(ctrl, 3, [0], [0])  # completed batches without drafts
    assert ctrl.plan(1) == 2
    assert ctrl.decisions[-1].reason == "no feedback"


def test_lagged_results_are_invisible_until_their_round_is_old_enough():
    """R-C2 with schedule overlap (lag 2): round n is planned from rounds <= n - 2."""
    ctrl = DraftStepController(3, StepPolicy(update_interval=5), table_cost({1: 1.0, 2: 2.0, 3: 3.0}),
                               pad_requests, lag=2, cold_start="k_max")
    feed(ctrl, 5, [3], [0], start_round=0)  # rounds 0..4 completed (all rejected)
    assert ctrl.plan(1, round_id=5) == 3  # sees rounds 0..3 only: 4 completed, no re-score
    assert ctrl.completed == 4
    assert ctrl.plan(1, round_id=6) == 1  # round 4 now visible: 5 completed, re-scored


def test_kv_coverage_hook_falls_back_to_k_max():
    """R-F7: a batch outside the calibrated KV ranges runs full width (k_max), recorded once."""
    ctrl = DraftStepController(3, StepPolicy(update_interval=1), table_cost({1: 1.0, 2: 2.0, 3: 3.0}), pad_requests,
                               covers=lambda bcap, kv: kv is None or kv <= 4096)
    feed(ctrl, 1, [3], [0])
    assert ctrl.plan(2, kv_len=100) == 1
    n = len(ctrl.decisions)
    assert ctrl.plan(2, kv_len=5000) == 3 and ctrl.plan(2, kv_len=6000) == 3
    assert len(ctrl.decisions) == n + 1 and "outside the calibrated coverage" in ctrl.decisions[-1].reason
    assert ctrl.plan(2, kv_len=100) == 1


def test_cold_start_chooses_k_from_the_cost_table_under_the_prior():
    """Issue 13: the first batch's k is the argmax under the stated prior (0.5 per position), not k_max."""
    # prior a = (0.5, 0.25, 0.125): k0 = 1/1.0, k1 = 1.5/1.2 = 1.25, k2 = 1.75/1.9, k3 = 1.875/3.0
    ctrl = DraftStepController(3, StepPolicy(update_interval=5), table_cost({0: 1.0, 1: 1.2, 2: 1.9, 3: 3.0}),
                               pad_requests)
    assert ctrl.plan(1) == 1
    d = ctrl.decisions[-1]
    assert d.reason.startswith("cold start") and d.previous_k == 3
    assert d.predicted == pytest.approx({0: 1.0, 1: 1.25, 2: 1.75 / 1.9, 3: 1.875 / 3.0})
    assert ctrl.plan(1) == 1 and ctrl.k_histogram == {1: 2}  # decided once; later batches keep it


def test_cold_start_at_k_zero_probes_at_a_bounded_counted_rate():
    """Issue 13: a prior that predicts a loss starts at plain decode; probes are <= 1/(interval+1)
    (explore_overhead 4: this table's k = 1 is explored at the base rate; the scaling is tested below)."""
    ctrl = DraftStepController(2, StepPolicy(update_interval=5, explore_overhead=4.0), table_cost({0: 1.0, 1: 5.0, 2: 9.0}),
                               pad_requests, probe_interval=10)
    ks = []
    for i in range(55):
        ks.append(ctrl.plan(1, round_id=i))
        ctrl.observe([min(ks[-1], 2)], [0], round_id=i)  # probes reject everything
    assert ctrl.decisions[0].reason.startswith("cold start") and ctrl.decisions[0].k == 0
    assert ks[0] == 1 and ks[1:10] == [0] * 9  # the prior chose k = 0: the first batch measures it (a probe)
    probes = [i for i, k in enumerate(ks) if k]
    assert all(ks[i] == 1 for i in probes)  # the cheapest useful look, not k_max
    assert ctrl.probe_rounds == len(probes) <= 1 + 55 // 10  # the cold start's probe + one per interval
    s = ctrl.exploration_summary()
    assert s["rounds"] == 55 and s["probes"] == len(probes) and s["probe_share"] <= (1 + 55 // 10) / 55 + 1e-9
    assert "probe rate <= 10.0% of batches" in ctrl.describe_exploration()


def test_cold_start_at_k_zero_leaves_it_on_the_first_measurement_when_speculation_pays():
    """The prior (0.5 per position) prices k = 1 under plain on this table (1.5 / 1.6 < 1); the drafts
    accept 90%, so the first batch's probe is what moves the controller to k = 1 at its next re-score,
    not a probe interval later (48 batches at B = 8 with the bundled MTP draft, issue 13)."""
    ctrl = DraftStepController(2, StepPolicy(update_interval=5), table_cost({0: 1.0, 1: 1.6, 2: 2.2}),
                               pad_requests, probe_interval=20)
    ks = []
    for i in range(30):
        ks.append(ctrl.plan(8, round_id=i))
        acc = [int((8 * i + j) % 10 != 0) for j in range(8)]  # 90% accepted
        ctrl.observe([min(ks[-1], 1)] * 8, [min(a, ks[-1]) for a in acc], round_id=i)
    assert ctrl.decisions[0].k == 0 and ks[0] == 1 and ctrl.decisions[1].reason == "probe"
    assert ks[5:] == [1] * 25  # left k = 0 at the first re-score (5 completed batches), kept k = 1


def test_the_cold_probe_waits_for_a_batch_whose_drafts_can_be_measured():
    """The stream's first decoding rounds often verify nothing (prefill took the row budget): the cold
    start's probe is not spent on them."""
    ctrl = DraftStepController(2, StepPolicy(), table_cost({0: 1.0, 1: 1.6, 2: 2.2}), pad_requests,
                               probe_interval=20)
    assert [ctrl.plan(8, can_verify=False) for _ in range(3)] == [0, 0, 0] and ctrl.probe_rounds == 0
    assert ctrl.plan(8) == 1 and ctrl.last_probe and ctrl.probe_rounds == 1
    assert ctrl.plan(8) == 0  # once: the periodic probes take over (no feedback observed here)


def test_no_cold_probe_without_probes_or_once_measured():
    """probe_interval = 0 means never probe, the cold start included; and a controller that already has
    feedback when it first plans (observed before its first batch) chooses on it, no probe."""
    ctrl = DraftStepController(1, StepPolicy(), table_cost({0: 1.0, 1: 5.0}), pad_requests, probe_interval=0)
    assert [ctrl.plan(1) for _ in range(3)] == [0, 0, 0] and ctrl.probe_rounds == 0
    ctrl = DraftStepController(1, StepPolicy(), table_cost({0: 1.0, 1: 5.0}), pad_requests, probe_interval=20)
    ctrl.observe([1], [0])
    assert ctrl.plan(1) == 0 and ctrl.probe_rounds == 0


# ---- k = 0 against an optimistic speculation (issue 13; adaspec's extension, zero_confidence) ----
PLAIN_VS_K1 = {0: 1.0, 1: 1.25}  # k = 1 pays iff a_1 > 0.25


def test_wilson_upper_bound_hand_computed():
    from adaspec.adaptive.feedback import wilson_upper

    # 3 of 20, z = 1: (0.15 + 0.025 + sqrt(0.15 * 0.85 / 20 + 1 / 1600)) / 1.05
    assert wilson_upper(3, 20, 1.0) == pytest.approx((0.175 + math.sqrt(0.007)) / 1.05)
    assert wilson_upper(0, 20, 1.0) == pytest.approx(0.05 / 1.05)
    assert wilson_upper(20, 20, 1.0) == pytest.approx(1.0) and wilson_upper(3, 20, 0.0) == 0.15
    assert wilson_upper(30, 200, 1.0) < wilson_upper(3, 20, 1.0)  # tighter with more drafts


def _at_k1(batch: int, accepted_of_20: int, z: float, probe_interval: int = 0) -> DraftStepController:
    ctrl = DraftStepController(1, StepPolicy(window_size=20, update_interval=5, zero_confidence=z),
                               table_cost(PLAIN_VS_K1), pad_requests, cold_start="k_max", probe_interval=probe_interval)
    assert ctrl.plan(batch) == 1
    for i in range(20):  # 20 batches; the first `accepted_of_20` accept every draft
        feed(ctrl, 1, [1] * batch, [1 if i < accepted_of_20 else 0] * batch)
    return ctrl


def _batches_until_k_zero_is_left(ctrl: DraftStepController, batch: int, limit: int = 400) -> int | None:
    assert ctrl.plan(batch) == 0  # entered on the point estimate (R-C2)
    for t in range(1, limit + 1):
        feed(ctrl, 1, [0] * batch, [0] * batch)  # a k = 0 batch: no drafts, nothing learnt
        if ctrl.plan(batch) != 0:
            return t
    return None


def test_at_k_ge_1_the_rule_is_r_c2s_point_estimate():
    """3 of 20 accepted predicts plain 8.7% better: both rules enter k = 0 at that re-score."""
    for z in (0.0, 1.0):
        ctrl = _at_k1(1, 3, z)
        assert ctrl.plan(1) == 0 and ctrl.decisions[-1].reason == "switch" and ctrl.decisions[-1].optimistic == {}


def test_k_zero_is_left_when_the_aged_upper_bound_beats_plain():
    """At k = 0 the evidence ages (weight 2^(-t/20)); the controller leaves when speculation at the
    Wilson bound beats plain by > 5%: soon after a close call, later after a clear loss, later
    with more drafts behind the estimate, and never with zero_confidence = 0 (no probes here)."""
    close = _batches_until_k_zero_is_left(_at_k1(1, 3, 1.0), 1)
    clear = _batches_until_k_zero_is_left(_at_k1(1, 0, 1.0), 1)
    many = _batches_until_k_zero_is_left(_at_k1(16, 3, 1.0), 16)
    assert close is not None and clear is not None and many is not None
    assert close <= 40 and close < clear and close < many  # 30, 65, 110 batches with these counts
    assert _batches_until_k_zero_is_left(_at_k1(1, 3, 0.0), 1) is None
    ctrl = _at_k1(1, 3, 1.0)
    _batches_until_k_zero_is_left(ctrl, 1)
    d = ctrl.decisions[-1]
    assert d.reason == "switch" and d.k == 1 and d.gain > 0.05 and d.optimistic[1] > 1.05 * d.predicted[0]


def test_leaving_k_zero_needs_more_than_the_min_gain():
    """The aged bound is compared with plain by R-C2's strict min-gain rule, like every switch."""
    ctrl = _at_k1(1, 0, 1.0)
    left = _batches_until_k_zero_is_left(ctrl, 1)
    keeps = [d for d in ctrl.decisions if d.reason == "keep" and d.k == 0 and d.optimistic]
    assert left and keeps and all(d.gain <= 0.05 for d in keeps)


def test_k_zero_is_left_for_the_cheapest_k_whose_bound_beats_plain():
    """Issue 13 (greedy B = 8): leaving k = 0 goes to the cheapest k >= 1 that beats plain at the
    aged bound, not to the point-best k (here k = 3, the most expensive look); R-C2 moves it on."""
    table = {0: 1.0, 1: 1.3, 2: 1.35, 3: 1.4}  # extra steps are cheap: the point estimate favours k = 3
    ctrl = DraftStepController(3, StepPolicy(window_size=20, update_interval=5, zero_confidence=3.0),
                               table_cost(table), pad_requests, cold_start="k_max", probe_interval=0)
    assert ctrl.plan(1) == 3
    for i in range(20):  # 2 of 20 rounds accept all three drafts, the rest none
        feed(ctrl, 1, [3], [3 if i < 2 else 0])
    assert ctrl.plan(1) == 0  # R-C2: plain predicted > 5% better than every k >= 1
    entered = ctrl.decisions[-1]
    assert max((1, 2, 3), key=lambda k: entered.predicted[k]) == 3
    for _ in range(40):
        feed(ctrl, 1, [0], [0])
        if ctrl.plan(1) != 0:
            break
    d = ctrl.decisions[-1]
    assert d.reason == "switch" and d.previous_k == 0 and d.k == 1 == ctrl.k
    paying = [k for k in (1, 2, 3) if d.optimistic[k] > 1.05 * d.predicted[0]]
    assert paying[0] == 1 and d.optimistic[3] > d.optimistic[1]  # k = 3 looked better, and cost more
    assert d.gain == pytest.approx(d.optimistic[1] / d.predicted[0] - 1)


def _at_k1_losing_slightly(plain_floor: bool, drafts: int = 200, **policy) -> DraftStepController:
    """k = 1 at a table where a quarter of the drafts accepted predicts k = 1 at 1.25 / 1.3 = 0.96x plain: a
    loss inside switch_min_gain (0.05); over 200 drafts it loses even one standard error above (Wilson: 0.281)."""
    ctrl = DraftStepController(1, StepPolicy(window_size=drafts, update_interval=drafts // 4, plain_floor=plain_floor,
                                             **policy), table_cost({0: 1.0, 1: 1.3}), pad_requests, cold_start="k_max",
                               probe_interval=0)
    assert ctrl.plan(1) == 1
    for i in range(drafts):
        feed(ctrl, 1, [1], [1 if i % 4 == 0 else 0])
    return ctrl


def test_a_k_predicted_below_plain_is_left_inside_the_min_gain():
    """Issue 13, the plain floor (adaspec's extension of R-C2): a speculating k that the re-score
    predicts slower than plain, even one standard error above its estimate (policy.floor_confidence), goes to
    plain at once, although plain's gain (4%) is inside switch_min_gain; R-C2's hysteresis alone
    (plain_floor=False) keeps the losing k."""
    ctrl = _at_k1_losing_slightly(plain_floor=True)
    assert ctrl.plan(1) == 0 == ctrl.k
    d = ctrl.decisions[-1]
    assert d.reason == "floor" and d.previous_k == 1 and d.predicted[1] < d.predicted[0]
    assert 0 < d.gain <= 0.05  # the switch is the floor's, not R-C2's

    r_c2 = _at_k1_losing_slightly(plain_floor=False)
    assert r_c2.plan(1) == 1 and r_c2.decisions[-1].reason == "keep"


def test_the_plain_floor_keeps_a_k_that_may_still_pay():
    """Over 20 drafts the same quarter accepted is 0.25 +- 0.1: one standard error above (Wilson, 0.35) k = 1
    pays 4%, so the floor keeps it (a point-estimate floor, floor_confidence=0, left marginal cells at plain for
    half their batches: bench/step_control_sim.py, BENCHMARKS.md stop 42); leaving k = 0 asks the same optimism."""
    assert _at_k1_losing_slightly(plain_floor=True, drafts=20).plan(1) == 1
    ctrl = _at_k1_losing_slightly(plain_floor=True, drafts=20, floor_confidence=0.0)
    assert ctrl.plan(1) == 0 and ctrl.decisions[-1].reason == "floor"
    with pytest.raises(ValueError, match="floor_confidence"):
        StepPolicy(floor_confidence=-1)


def test_the_plain_floor_does_not_move_a_k_that_beats_plain():
    """A speculating k that beats plain keeps R-C2's hysteresis: k = 1 predicted ~3% better than the
    current k = 2 is inside switch_min_gain, and k = 2 still beats plain, so nothing switches."""
    ctrl = DraftStepController(2, StepPolicy(window_size=20, update_interval=5), table_cost({0: 1.0, 1: 1.2, 2: 1.4}),
                               pad_requests, cold_start="k_max", probe_interval=0)
    assert ctrl.plan(1) == 2
    for i in range(20):  # a = (0.5, 0.2): k = 1 1.25 / 1.2, k = 2 1.7 / 1.4, plain 1
        feed(ctrl, 1, [2], [2 if i < 4 else 1 if i < 10 else 0])
    assert ctrl.plan(1) == 2
    d = ctrl.decisions[-1]
    assert d.reason == "keep" and d.predicted[2] > d.predicted[0] and 0 < d.gain <= 0.05


# ---- exploration at k = 0 priced by what speculation costs here (issue 13; policy.explore_overhead) ----
def _probe_batches(table: dict[int, float], batches: int, **policy) -> list[int]:
    """Batch indices of the probes after k = 1 (5 batches) went to k = 0 on rejections (zero_confidence 0:
    probes are the only way out here)."""
    ctrl = DraftStepController(1, StepPolicy(update_interval=5, zero_confidence=0.0, **policy), table_cost(table),
                               pad_requests, probe_interval=10, cold_start="k_max")
    ks = []
    for i in range(batches + 5):
        ks.append(ctrl.plan(16, round_id=i))
        ctrl.observe([ks[-1]] * 16, [0] * 16, round_id=i)  # nothing is ever accepted: plain is right
    assert ks[:6] == [1] * 5 + [0] and ctrl.probe_rounds == sum(ks[5:])
    return [i - 5 for i, k in enumerate(ks) if k and i >= 5]


def test_dearer_speculation_is_probed_less_often_at_the_same_cost_per_batch():
    """Issue 13, greedy B = 16: probing a k = 1 that costs 1.7x plain every 20 batches cost ~3.5% of
    plain throughput. With explore_overhead 0.25 (default) a probe comes every probe_interval
    batches while k = 1 costs <= 1.25x plain, and proportionally less often above: every
    ceil(10 * 0.75 / 0.25) = 30 batches at 1.75x, so probes cost <= 0.25 / 10 of plain time at both."""
    cheap = _probe_batches({0: 1.0, 1: 1.2}, 200, max_explore_backoff=1)
    dear = _probe_batches({0: 1.0, 1: 1.75}, 200, max_explore_backoff=1)
    # one batch in every probe_every (the probe counts towards the next interval)
    assert cheap == list(range(10, 200, 10)) and dear == list(range(30, 200, 30))
    for table, probes in (({0: 1.0, 1: 1.2}, cheap), ({0: 1.0, 1: 1.75}, dear)):
        extra = len(probes) * (table[1] - table[0])  # probe time over plain, in plain batches
        assert extra / 200 <= 0.25 / 10 + 1e-9
    # a larger explore_overhead restores the base rate; the scale is the controller's public figure
    assert _probe_batches({0: 1.0, 1: 1.75}, 200, explore_overhead=0.75, max_explore_backoff=1) == cheap
    ctrl = DraftStepController(1, StepPolicy(), table_cost({0: 1.0, 1: 1.75}), pad_requests, probe_interval=10)
    assert ctrl.explore_scale({0: 1.0, 1: 1.75}) == pytest.approx(3.0) and ctrl.probe_every({0: 1.0, 1: 1.75}) == 30
    assert ctrl.explore_scale({0: 1.0, 1: 1.1}) == 1.0 and ctrl.explore_scale({1: 1.0}) == 1.0


def test_exploration_backs_off_while_the_batch_holds_the_same_requests():
    """Where a look is dear (k = 1 at 1.75x plain: every 30 batches), a probe that finds plain still right
    (here: even at the upper bound) doubles the interval to the next, up to max_explore_backoff, so a batch
    whose requests never change (a closed batch) explores less and less; a request that joins resets it
    (what the probes found was about the others). Where a look is cheap (1.2x) nothing backs off."""
    dear = {0: 1.0, 1: 1.75}
    assert _probe_batches(dear, 400) == [30, 90, 210]  # intervals 30, 60, 120 (then 240: past the run)
    assert _probe_batches(dear, 400, max_explore_backoff=2) == [30, 90, 150, 210, 270, 330, 390]
    assert _probe_batches({0: 1.0, 1: 1.2}, 200) == list(range(10, 200, 10))
    # pooled estimates: the probes that measure a request that joined (per_request) are test_batch_acceptance's
    ctrl = DraftStepController(1, StepPolicy(update_interval=5, zero_confidence=0.0, per_request=False),
                               table_cost(dear), pad_requests, probe_interval=10, cold_start="k_max")
    ks, backoff = [], []
    for i in range(300):
        batch = ["a", "b"] if i < 150 else ["a", "c"]  # request c joins at batch 150
        ks.append(ctrl.plan(2, round_id=i, requests=batch))
        backoff.append(ctrl.backoff)
        ctrl.observe([ks[-1]] * 2, [0] * 2, round_id=i)
    # k = 1 until batch 5, probes 30 and then 60 batches later; c joins at 150: the backoff is reset, a probe is
    # due at once, and the backoff grows again while the batch holds a and c
    assert [i for i, k in enumerate(ks) if k and i >= 5] == [35, 95, 150, 210]
    assert backoff[149] == 4 and backoff[150] == 1 and backoff[-1] == 4
    with pytest.raises(ValueError, match="max_explore_backoff"):
        StepPolicy(max_explore_backoff=0)


def test_k_zero_ages_its_evidence_slower_when_speculation_costs_more():
    """The half-life of the evidence at k = 0 is window_size * explore_scale: halving explore_overhead
    doubles the scale of a 1.25x table and so (nearly) doubles the batches before an optimistic leave."""
    def left(explore_overhead):
        ctrl = DraftStepController(1, StepPolicy(window_size=20, update_interval=5, explore_overhead=explore_overhead),
                                   table_cost(PLAIN_VS_K1), pad_requests, cold_start="k_max", probe_interval=0)
        assert ctrl.plan(1) == 1
        for i in range(20):
            feed(ctrl, 1, [1], [1 if i < 3 else 0])
        return _batches_until_k_zero_is_left(ctrl, 1)

    base, slow = left(0.25), left(0.125)
    assert base is not None and slow is not None
    assert 2 * base - 5 <= slow <= 2 * base + 5


def test_a_probe_is_fresh_evidence_at_k_zero():
    """Evidence ages from when k = 0 took effect, or from when it was observed if later (a probe):
    hand-computed weights, and the old single-weight rule when nothing came after k = 0."""
    from adaspec.adaptive.feedback import AcceptanceWindow

    w = AcceptanceWindow(1, 20)
    w.observe([1] * 4, [1, 0, 0, 0])  # batch 1: 1 of 4
    assert w.aged_prefix_acceptance(0.0, 41, 1, 20.0)[0] == pytest.approx(0.25)
    assert w.aged_prefix_acceptance(1.0, 41, 1, 20.0)[0] == pytest.approx(w.prefix_acceptance(1.0, 0.25)[0])
    for _ in range(9):
        w.observe([0], [0])  # k = 0 batches: counted, not in the window
    w.observe([1] * 4, [1] * 4)  # batch 11, a probe after k = 0 took effect at 1: 4 of 4
    # at 31: batch 1 weighs 2^(-30/20), the probe 2^(-20/20); z = 0: (w1 * 1 + w2 * 4) / (4 w1 + 4 w2)
    w1, w2 = 0.5 ** 1.5, 0.5
    assert w.aged_prefix_acceptance(0.0, 31, 1, 20.0)[0] == pytest.approx((w1 + 4 * w2) / (4 * w1 + 4 * w2))
    with pytest.raises(ValueError, match="half_life"):
        w.aged_prefix_acceptance(0.0, 31, 1, 0.0)


def test_where_plain_is_right_exploration_costs_at_most_two_percent_without_timing_noise():
    """Issue 13's floor, decisions only (bench/step_control_sim.py: the controller on seeded Bernoulli
    acceptance, charged a cost table): with this VM's B = 16 table (k = 1 at 1.69x plain) and the
    greedy draft's first-position rate of the mixed stream (~0.55) or lower, plain is the best fixed
    setting and the controller keeps >= 0.98x of it; before explore_overhead it kept 0.961-0.989x."""
    from bench.step_control_sim import fixed_throughputs, rates, simulate

    costs = [101.5, 171.9, 234.1, 300.0]
    for a in (0.1, 0.3, 0.55):
        alpha = rates(a, 3, 1.1)
        fixed = fixed_throughputs(alpha, costs, 16)
        assert max(range(4), key=fixed.__getitem__) == 0
        tok_per_ms, hist, probes = simulate(alpha, costs, 16, StepPolicy(), 2000, seed=0, probe_interval=20)
        assert tok_per_ms / fixed[0] >= 0.98, (a, hist, probes)
        assert probes <= 2000 / 40  # probes every ceil(20 * 0.69 / 0.25) = 56 batches at most


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan")])
def test_confidence_stop_must_be_a_probability_below_one(bad):
    """policy.confidence_stop (adaptive/step_policy.py) is refused outside [0, 1), in the policy and in the config
    file's schema, naming the field; the round-level behaviour is tested in test_adaptive_engine.py and
    test_adaptive_losslessness.py."""
    from pydantic import ValidationError

    from adaspec.calibration.schema import DraftStepPolicy

    with pytest.raises(ValueError, match="confidence_stop"):
        StepPolicy(confidence_stop=bad)
    with pytest.raises(ValidationError, match="confidence_stop"):
        DraftStepPolicy(confidence_stop=bad)
