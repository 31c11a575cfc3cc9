"""The batch's acceptance from its own requests (adaptive/batch_acceptance.py, issue 13): hand-computed estimates,
the pooled fallbacks, and the draft step controller re-scoring when the batch's requests change."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaspec.adaptive.batch_acceptance import SHRINK_DRAFTS, batch_prefix_acceptance, wilson_upper_array
from adaspec.adaptive.feedback import AcceptanceWindow, wilson_upper
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy

S = SHRINK_DRAFTS


def window(batches, window_size=20, max_steps=2):
    """A window fed (verify_lens, accepted, ids) batches."""
    w = AcceptanceWindow(max_steps, window_size)
    for lens, acc, ids in batches:
        w.observe(lens, acc, ids)
    return w


# a accepts both positions in all 4 of its drafts, b none of its 4; pooled: position 1 at 4/8, position 2 at 4/4
AB = [([2, 2], [2, 0], ["a", "b"])] * 4


def test_a_request_is_priced_at_its_own_counts_shrunk_towards_the_pooled_rate():
    w = window(AB)
    np.testing.assert_allclose(w.conditional_rates(), [0.5, 1.0])  # pooled (Kaplan-Meier: b never reached 2)
    w.batch = ("a",)
    a1 = (4 + S * 0.5) / (4 + S)
    a2 = (4 + S * 1.0) / (4 + S)
    np.testing.assert_allclose(w.prefix_acceptance(), [a1, a1 * a2])
    w.batch = ("b",)
    b1 = (0 + S * 0.5) / (4 + S)
    b2 = (0 + S * 1.0) / (0 + S)  # b never reached position 2: the pooled rate
    np.testing.assert_allclose(w.prefix_acceptance(), [b1, b1 * b2])
    w.batch = None  # no batch: the pooled estimate, as before
    np.testing.assert_allclose(w.prefix_acceptance(), [0.5, 0.5])


def test_the_batch_is_the_mean_of_its_requests_and_a_newcomer_is_priced_at_the_pooled_rate():
    w = window(AB)
    w.batch = ("a", "b", "c")  # c has no draft in the window
    a1, a2 = (4 + S * 0.5) / (4 + S), 1.0
    b1 = (S * 0.5) / (4 + S)
    expect = np.array([a1 + b1 + 0.5, a1 * a2 + b1 * 1.0 + 0.5 * 1.0]) / 3
    np.testing.assert_allclose(w.prefix_acceptance(), expect)
    # the window's own requests, in the proportions they drafted: the pooled estimate, up to the shrinkage
    w.batch = ("a", "b")
    np.testing.assert_allclose(w.prefix_acceptance(), w.conditional_rates().cumprod(), atol=0.12)


def test_the_bound_moves_each_request_z_over_sqrt_b_of_its_standard_errors():
    w = window(AB)
    w.batch = ("a", "b")
    z = 2.0
    zb = z / math.sqrt(2)
    a1 = wilson_upper(4 + S * 0.5, 4 + S, zb)
    b1 = wilson_upper(S * 0.5, 4 + S, zb)
    a2, b2 = wilson_upper(4 + S, 4 + S, zb), wilson_upper(S, S, zb)
    np.testing.assert_allclose(w.prefix_acceptance(z), [(a1 + b1) / 2, (a1 * a2 + b1 * b2) / 2])
    np.testing.assert_allclose(wilson_upper_array(np.array([3.0, 0.0]), np.array([7.0, 2.0]), 1.3),
                               [wilson_upper(3, 7, 1.3), wilson_upper(0, 2, 1.3)])


def test_aged_counts_weigh_per_request_and_pooled_alike():
    w = window(AB)
    w.batch = ("a",)
    # every batch observed before `since`: each weighs 2^(-t / half-life), as prefix_acceptance(z, weight)
    now, since, half = w.completed + 6, w.completed, 3.0
    np.testing.assert_allclose(w.aged_prefix_acceptance(1.0, now, since, half), w.prefix_acceptance(1.0, 0.25))
    a1 = wilson_upper(0.25 * 4 + S * 0.5, 0.25 * 4 + S, 1.0)
    assert w.aged_prefix_acceptance(1.0, now, since, half)[0] == pytest.approx(a1)


def test_pooled_whenever_a_window_batch_has_no_request_ids():
    w = window(AB)
    w.observe([2, 2], [0, 0])  # no ids (another caller): the window cannot be split by request
    w.batch = ("a",)
    np.testing.assert_allclose(w.prefix_acceptance(), np.cumprod(w.conditional_rates()))
    with pytest.raises(ValueError, match="request ids"):
        w.observe([1, 1], [0, 0], ["a"])
    with pytest.raises(ValueError, match="at least one"):
        batch_prefix_acceptance((), lambda r: None, np.array([0.5]))


def test_requests_leave_the_window_with_their_drafts():
    w = window(AB, window_size=4)
    for _ in range(4):  # a's and b's drafts are pushed out by c's
        w.observe([2], [1], ["c"])
    assert set(w.requests.sums) == {"c"}
    w.batch = ("c",)
    np.testing.assert_allclose(w.prefix_acceptance()[0], (4 + S * 1.0) / (4 + S))


def test_the_controller_rescores_when_the_requests_change_and_prices_the_batch_it_has():
    """Two requests that accept nothing drive k to 0; then one leaves and a request that accepted most of its
    drafts joins, the count staying 2. Per request, the batch is re-scored at once and, priced by who is in
    it, leaves k = 0; pooled (R-C2's window), nothing happens until the next interval."""
    costs = {0: 1.0, 1: 1.4}
    for per_request in (True, False):
        ctrl = DraftStepController(1, StepPolicy(update_interval=18, per_request=per_request),
                                   lambda bcap, k: costs.get(k), lambda B: 2 if B <= 2 else None, probe_interval=0)
        for _ in range(10):
            ctrl.window.observe([1, 1], [0, 0], ["lo1", "lo2"])
        for _ in range(8):
            ctrl.window.observe([1], [1], ["hi"])
        assert ctrl.plan(2, round_id=18, requests=["lo1", "lo2"]) == 0  # both estimates: plain wins
        k = ctrl.plan(2, round_id=19, requests=["lo1", "hi"])
        if per_request:
            d = ctrl.decisions[-1]
            assert (k, d.reason, d.previous_k) == (1, "switch", 0)
            lo = (0 + S * 8 / 28) / (10 + S)
            hi = (8 + S * 8 / 28) / (8 + S)
            assert d.predicted[1] == pytest.approx(2 * (1 + (lo + hi) / 2) / 1.4)
        else:
            assert k == 0 and ctrl.decisions[-1].completed == 18


def test_feedback_reaches_the_window_with_the_requests_plan_was_given():
    ctrl = DraftStepController(1, StepPolicy(), lambda bcap, k: {0: 1.0, 1: 1.2}.get(k), lambda B: 4,
                               probe_interval=0, cold_start="k_max")
    assert ctrl.plan(2, round_id=1, requests=["x", "y"]) == 1
    ctrl.observe([1, 1], [1, 0], round_id=1)
    ctrl.plan(2, round_id=2, requests=["x", "y"])
    assert {r: list(c[0]) for r, c in ctrl.window.requests.sums.items()} == {"x": [1.0], "y": [0.0]}
    ctrl.observe([1, 1, 1], [0, 0, 0], round_id=2)  # a result that does not match the planned requests: pooled only
    ctrl.plan(2, round_id=3, requests=["x", "y"])
    assert ctrl.window._anonymous == 1
    off = DraftStepController(1, StepPolicy(per_request=False), lambda bcap, k: {0: 1.0, 1: 1.2}.get(k),
                              lambda B: 4, probe_interval=0)
    off.plan(2, round_id=1, requests=["x", "y"])
    assert off.window.batch is None


def join_at_k_zero(c_accepts: bool) -> tuple[list[int], DraftStepController]:
    """a and b accept nothing, so plain is right (k = 1 at 1.15x plain); c joins at batch 40."""
    ctrl = DraftStepController(1, StepPolicy(update_interval=5, zero_confidence=0.0), lambda bcap, k: {0: 1.0, 1: 1.15}.get(k),
                               lambda B: 2 if B <= 2 else None, probe_interval=20, cold_start="k_max")
    ks = []
    for i in range(100):
        batch = ["a", "b"] if i < 40 else ["a", "c"]
        k = ctrl.plan(2, round_id=i, requests=batch)
        ks.append(k)
        ctrl.observe([k] * 2, [k if r == "c" and c_accepts else 0 for r in batch], round_id=i)
    return ks, ctrl


def test_a_request_that_joins_at_k_zero_is_probed_while_its_acceptance_could_decide():
    """At k = 0 the window does not move, so a request that joins would stay at the pooled rate until the next
    periodic probe (every 20 batches); instead a probe comes every update_interval batches while a request has
    fewer than SHRINK_DRAFTS drafts and its upper bound (2 standard errors of its shrunk counts) could make
    speculation pay, and the engine drafts for it first."""
    ks, ctrl = join_at_k_zero(c_accepts=True)
    assert ks[:5] == [1] * 5 and ks[5] == 0  # a and b measured: plain is right
    # periodic at 25; c joined at 40: probes at 40 and 45, and with c's two accepted drafts the re-score at 50
    # prices the batch at ((0 + 4 x 2/16) / (8 + 4) + (2 + 4 x 2/16) / (2 + 4)) / 2 = 0.229 per draft (pooled
    # rate 2/16; a has 8 drafts, c 2): k = 1 pays 6.9% at 1.15x plain
    assert [i for i, k in enumerate(ks) if k and i >= 5] == [25, 40, 45] + list(range(50, 100))
    first = next(d for d in ctrl.decisions if d.reason == "switch" and d.k == 1)
    assert first.completed == 50 and first.predicted[1] == pytest.approx(2 * (1 + (0.5 / 12 + 2.5 / 6) / 2) / 1.15)
    assert "fewer than 4 drafts measured" in ctrl.describe_exploration()
    # c rejects its drafts too: after two, even its upper bound cannot make k = 1 pay, and the probing stops
    ks, ctrl = join_at_k_zero(c_accepts=False)
    assert [i for i, k in enumerate(ks) if k and i >= 5] == [25, 40, 45, 65, 85]  # then the periodic probes
