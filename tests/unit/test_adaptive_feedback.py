"""Acceptance feedback (R-C2, R-C4): completed rounds only, a window of completed batches, explicit lag."""

from __future__ import annotations

import numpy as np
import pytest

from adaspec.adaptive.feedback import AcceptanceWindow, LaggedFeedback


def test_cold_start_prior_before_any_feedback():
    w = AcceptanceWindow(max_steps=3, window_size=5, prior_rate=0.5)
    assert not w.has_data and w.completed == 0
    np.testing.assert_allclose(w.prefix_acceptance(), [0.5, 0.25, 0.125])


def test_prefix_acceptance_equals_counter_ratio_when_all_positions_verified():
    """R-C2 / PRIOR_ART §5.1: a_i = (#drafts with m >= i) / (#drafts with L >= i)."""
    w = AcceptanceWindow(max_steps=3, window_size=5)
    w.observe([3, 3, 3, 3], [0, 1, 2, 3])
    np.testing.assert_allclose(w.prefix_acceptance(), [3 / 4, 2 / 4, 1 / 4])
    w.observe([3, 3], [3, 3])
    np.testing.assert_allclose(w.prefix_acceptance(), [5 / 6, 4 / 6, 3 / 6])


def test_zero_length_drafts_do_not_count():
    w = AcceptanceWindow(max_steps=2, window_size=5)
    w.observe([2, 0, 0], [1, 0, 0])
    np.testing.assert_allclose(w.prefix_acceptance(), [1.0, 0.0])
    assert w.drafts_in_window == 1


def test_only_the_last_window_size_batches_count():
    """R-C2: a window of the last `window_size` completed batches."""
    w = AcceptanceWindow(max_steps=2, window_size=3)
    for _ in range(2):
        w.observe([2, 2], [0, 0])  # rejected everything; will leave the window
    for _ in range(3):
        w.observe([2, 2], [2, 2])
    assert w.batches_in_window == 3 and w.completed == 5
    np.testing.assert_allclose(w.prefix_acceptance(), [1.0, 1.0])
    w.observe([2], [0])  # pushes one accepting batch out: 4 of 5 drafts accept position 1
    np.testing.assert_allclose(w.prefix_acceptance(), [4 / 5, 4 / 5])


def test_batch_without_drafts_counts_as_completed_but_keeps_the_window():
    w = AcceptanceWindow(max_steps=2, window_size=2)
    w.observe([2], [1])
    for _ in range(5):
        w.observe([0, 0], [0, 0])  # k = 0 rounds
    assert w.completed == 6 and w.batches_in_window == 1
    np.testing.assert_allclose(w.prefix_acceptance(), [1.0, 0.0])


def test_unseen_positions_carry_the_last_measured_conditional_rate():
    w = AcceptanceWindow(max_steps=4, window_size=5)
    w.observe([2, 2], [2, 1])  # alpha_1 = 1, alpha_2 = 1/2, positions 3-4 never verified
    np.testing.assert_allclose(w.conditional_rates(), [1.0, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(w.prefix_acceptance(), [1.0, 0.5, 0.25, 0.125])


def test_zero_survival_stays_zero_deeper():
    w = AcceptanceWindow(max_steps=3, window_size=5)
    w.observe([3, 3], [0, 0])
    np.testing.assert_allclose(w.prefix_acceptance(), [0.0, 0.0, 0.0])


def test_mixed_verify_lengths_stay_non_increasing():
    """n_i / v_i would give a_2 = 1 > a_1 = 1/2 here; the conditional-rate product does not."""
    w = AcceptanceWindow(max_steps=2, window_size=5)
    w.observe([1, 2], [0, 2])
    a = w.prefix_acceptance()
    np.testing.assert_allclose(a, [0.5, 0.5])
    assert np.all(np.diff(a) <= 0)


def test_invalid_feedback_is_rejected():
    w = AcceptanceWindow(max_steps=2, window_size=5)
    with pytest.raises(ValueError):
        w.observe([1], [2])
    with pytest.raises(ValueError):
        w.observe([3], [0])
    with pytest.raises(ValueError):
        w.observe([1, 1], [0])
    with pytest.raises(ValueError):  # a batch without drafts cannot have accepted any (its fast path checks too)
        w.observe([0, 0], [0, 1])
    with pytest.raises(ValueError):
        w.observe([0, 0], [0])
    assert w.completed == 0


def test_rates_equal_the_array_wilson_bound_per_position_bit_for_bit():
    """The window's rates are computed on Python floats (a re-score's hot path, feedback.wilson_upper); each reached
    position must carry exactly the value of the array form the per-request estimates use
    (batch_acceptance.wilson_upper_array), an unreached one its predecessor's (the step controller's decisions are
    compared by a digest of its decision records across such changes)."""
    from adaspec.adaptive.batch_acceptance import wilson_upper_array

    def wilson_upper(a, r, z):
        return float(wilson_upper_array(np.array([a]), np.array([r]), z)[0])

    rng = np.random.default_rng(5)
    w = AcceptanceWindow(max_steps=6, window_size=4)
    for _ in range(200):
        reached = rng.integers(0, 4, size=6).astype(np.float64) * rng.choice([1.0, 0.37, 2 ** -1.3])
        accepted = np.minimum(reached, rng.integers(0, 4, size=6) * 0.5)
        z = float(rng.choice([0.0, 1.0, 2.0]))
        want, last = [], w.prior_rate
        for a, r in zip(accepted, reached):
            if r > 0:
                last = wilson_upper(float(a), float(r), z)
            want.append(last)
        got = w._rates(accepted, reached, z)
        assert got.tolist() == want  # exact, not approx


def test_lag_two_hides_the_previous_round():
    """Schedule overlap: planning round n sees rounds <= n - 2; round n - 1 is still running."""
    fb = LaggedFeedback(lag=2)
    n = 10
    fb.push(n - 1, "r9")
    fb.push(n - 2, "r8")
    assert fb.release(n) == ["r8"]
    assert fb.release(n) == []  # each result is released once
    assert fb.release(n + 1) == ["r9"]


def test_lag_one_and_ordering():
    fb = LaggedFeedback(lag=1)
    fb.push(5, "r5")
    fb.push(3, "r3")
    fb.push(4, "r4")
    assert fb.release(5) == ["r3", "r4"]
    assert fb.pending == 1
    assert fb.release(6) == ["r5"]
    fb.push(None, "now")  # untagged: the caller vouches for the lag
    assert fb.release(0) == ["now"]
    with pytest.raises(ValueError):
        LaggedFeedback(lag=0)


def test_running_sums_equal_a_recount_of_the_window_after_many_batches():
    """R-C2: the window's sums, kept in place as batches enter and leave (issue 13's controller-time work), equal
    the counts recomputed from the last `window_size` drafting batches, pooled and per request; the estimates
    read from them equal the ones a fresh window fed only those batches gives."""
    rng = np.random.default_rng(7)
    K, W = 4, 6
    w = AcceptanceWindow(max_steps=K, window_size=W)
    kept = []
    for _ in range(60):
        ids = [f"r{i}" for i in rng.choice(8, size=int(rng.integers(1, 5)), replace=False)]
        lens = [int(rng.integers(0, K + 1)) for _ in ids]
        acc = [int(rng.integers(0, L + 1)) for L in lens]
        w.observe(lens, acc, ids)
        if any(lens):
            kept = (kept + [(lens, acc, ids)])[-W:]
    pos = np.arange(1, K + 1)
    n = sum((pos <= m).astype(int) for lens, accs, _ in kept for L, m in zip(lens, accs) if L)
    r = sum(((pos <= L) & (pos <= m + 1)).astype(int) for lens, accs, _ in kept for L, m in zip(lens, accs) if L)
    v = sum((pos <= L).astype(int) for lens, accs, _ in kept for L, m in zip(lens, accs) if L)
    np.testing.assert_array_equal(w._accepted, n)
    np.testing.assert_array_equal(w._reached, r)
    np.testing.assert_array_equal(w.verified_counts(), v)
    per = {}
    for lens, accs, ids in kept:
        for L, m, rid in zip(lens, accs, ids):
            if L:
                s = per.setdefault(rid, [np.zeros(K), np.zeros(K)])
                s[0] += pos <= m
                s[1] += (pos <= L) & (pos <= m + 1)
    assert set(w.requests.sums) == set(per)
    for rid, (a, b) in per.items():
        np.testing.assert_array_equal(w.requests.sums[rid][0], a)
        np.testing.assert_array_equal(w.requests.sums[rid][1], b)
    fresh = AcceptanceWindow(max_steps=K, window_size=W)
    for lens, accs, ids in kept:
        fresh.observe(lens, accs, ids)
    for batch in (None, ("r0", "r3", "r5")):
        w.batch = fresh.batch = batch
        np.testing.assert_allclose(w.prefix_acceptance(), fresh.prefix_acceptance(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(w.prefix_acceptance(z=1.0), fresh.prefix_acceptance(z=1.0), rtol=0, atol=1e-12)
