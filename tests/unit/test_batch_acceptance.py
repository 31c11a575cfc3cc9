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


def test_a_draft_step_probe_drafts_for_the_least_measured_requests_first():
    """engine/control.py: a probe drafts for a quarter of the batch; with the draft step's per-request window, the
    requests with the fewest drafts in it come first (then the fewest pending refresh entries, then batch order),
    so a probe measures what the window knows least about; a request that may not verify comes last."""
    from types import SimpleNamespace

    from adaspec.engine.control import AdaptiveControl

    window = AcceptanceWindow(1, 20)
    for _ in range(3):
        window.observe([1, 1, 1, 1, 1], [1, 0, 1, 0, 1], ["r0", "r1", "r2", "r3", "r4"])
    window.observe([1, 1], [0, 0], ["r0", "r6"])
    window.batch = ("r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7")
    pending = {"r0": 0, "r1": 1, "r2": 2, "r3": 3, "r4": 4, "r5": 9, "r6": 0, "r7": 1}
    fake = SimpleNamespace(step=SimpleNamespace(window=window),
                           engine=SimpleNamespace(rounds=SimpleNamespace(pending_entries=pending.get)))
    decoding = [SimpleNamespace(request_id=r) for r in window.batch]
    caps = (1, 1, 1, 1, 1, 1, 1, 0)  # r7 (no draft, fewest pending) may not verify
    subset, new_caps = AdaptiveControl._probe_subset(fake, decoding, caps)
    assert subset == (5, 6)  # r5: no draft; r6: one; then r0-r4 (3-4 drafts); r7 last (cap 0)
    assert new_caps == (0, 0, 0, 0, 0, 1, 1, 0)
    window.batch = None  # pooled (policy.per_request off): the fewest pending entries first, as adaptive verify
    assert AdaptiveControl._probe_subset(fake, decoding, caps)[0] == (0, 6)


def test_each_requests_own_prefix_acceptance_rows_average_to_the_batchs():
    """window.request_prefix_acceptance (the closed-batch score's per-request depth profile, stop 43): one row per
    request of `batch`, in its order, each the estimate the batch's mean is made of; None while pooled."""
    w = window(AB)
    assert w.request_prefix_acceptance() is None  # no batch set: pooled estimates
    w.batch = ("b", "a")
    a1, a2 = (4 + S * 0.5) / (4 + S), (4 + S * 1.0) / (4 + S)
    b1, b2 = (0 + S * 0.5) / (4 + S), 1.0
    rows = w.request_prefix_acceptance()
    np.testing.assert_allclose(rows, [[b1, b1 * b2], [a1, a1 * a2]])
    np.testing.assert_allclose(rows.mean(axis=0), w.prefix_acceptance())
