"""bench/step_closed_sim.py, the draft step on simulated closed batches of unlike requests (issue 13, stop 43):
its pricing between buckets, its copy of the engine's closed view, and the drain it exists to show."""

from __future__ import annotations

import numpy as np
import pytest

from adaspec.adaptive.step_controller import StepPolicy
from bench.step_closed_sim import Costs, closed_view, run_cell, serve


def test_a_round_between_buckets_is_priced_in_between():
    costs = Costs({1: [10.0, 12.0], 4: [40.0, 64.0]})
    assert costs(1, 1) == 12.0 and costs(4, 0) == 40.0
    assert costs(2, 1) == pytest.approx(12.0 + (64.0 - 12.0) / 3)
    assert costs(3, 0) == pytest.approx(10.0 + 2 * 30.0 / 3)
    assert costs.pad(2) == 4 and costs.pad(1) == 1


def test_the_closed_view_is_the_engines_shrunk_relative_acceptance():
    """engine/control.py's _closed_batch: rho = (accepted + 16 mean) / (drafted + 16) / mean."""
    view = closed_view(np.array([10, 20]), np.array([4.0, 0.0]), np.array([4.0, 0.0]))
    mean = 4.0 / 4.0
    assert view[0] == (10, pytest.approx((4 + 16 * mean) / (4 + 16) / mean))
    assert view[1] == (20, pytest.approx(1.0))
    assert closed_view(np.array([5]), np.array([1.0]), np.array([1.0])) is None


def test_a_fixed_k_in_a_closed_batch_ends_with_its_slowest_request():
    """Two requests that accept every draft and two that accept none: at a fixed k = 1 the batch still runs
    all of the slow requests' tokens, one per round (the drain R-C1's per-round score does not see)."""
    costs = Costs({1: [10.0, 11.0], 4: [20.0, 30.0]})
    alpha = np.array([[0.0], [0.0], [1.0], [1.0]])
    ms, rounds = serve(None, costs, alpha, 64, np.random.default_rng(0), 0.0, 1, 0, 0)
    assert rounds == 64  # the slow requests' 64 tokens, one a round
    # 32 rounds of four (the fast pair is done after 32 rounds of 2 tokens), then 32 rounds of two
    assert ms == pytest.approx(32 * 30.0 + 32 * costs(2, 1))
    plain_ms, plain_rounds = serve(None, costs, alpha, 64, np.random.default_rng(0), 0.0, 0, 0, 0)
    assert plain_rounds == 64 and plain_ms == pytest.approx(64 * 20.0)
    per_round = 4 * (1 + 0.5) / 30.0 / (4 / 20.0)  # R-C1's k = 1 against plain: tokens per ms at the mean rate
    assert per_round == pytest.approx(1.0)
    assert plain_ms / ms < 0.9  # the closed batch loses what the per-round score calls even


def test_a_cell_is_seeded_and_compares_every_fixed_k():
    costs = Costs({1: [25.2, 27.6, 31.2], 4: [32.4, 51.4, 63.8]})
    alpha = np.array([[0.4, 0.4], [0.4, 0.4], [0.9, 0.9], [0.7, 0.7]])
    a = run_cell(alpha, costs, 2, 32, 2, StepPolicy(), 3, 0.05, 20)
    b = run_cell(alpha, costs, 2, 32, 2, StepPolicy(), 3, 0.05, 20)
    assert a == b
    controller_ms, fixed, hist = a
    assert set(fixed) == {0, 1, 2} and controller_ms > 0
    assert fixed[0] == pytest.approx(2 * 32 * 32.4)  # plain: 32 rounds of four, twice
    assert sum(hist.values()) >= 2 * 16  # every round of both serves was planned
