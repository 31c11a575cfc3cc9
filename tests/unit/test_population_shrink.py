"""The population a request's acceptance is shrunk towards (policy.population_drafts; adaptive/feedback.py,
batch_acceptance.py; issue 13): hand-computed estimates, the population's extent, its never being aged, and 0
keeping the window's pooled rates exactly."""

from __future__ import annotations

import numpy as np
import pytest

from adaspec.adaptive.batch_acceptance import SHRINK_DRAFTS
from adaspec.adaptive.feedback import AcceptanceWindow, wilson_upper
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy
from adaspec.calibration.schema import DraftStepPolicy

S = SHRINK_DRAFTS


def feed(w, request, accepted, n):
    """n rounds of one request verifying one draft token, `accepted` of it each time."""
    for _ in range(n):
        w.observe([1], [accepted], [request])


def test_a_newcomer_is_priced_at_the_population_not_at_the_window_of_whoever_came_before():
    # B = 1, requests one after another: "a" accepts 30 drafts then misses 20; the window (20 batches) holds only
    # the misses, the population (>= 50 drafts) all 50
    w = AcceptanceWindow(1, 20, population_drafts=50)
    feed(w, "a", 1, 30)
    feed(w, "a", 0, 20)
    w.batch = ("b",)
    np.testing.assert_allclose(w.prefix_acceptance(), [30 / 50])
    w.batch = ("a",)  # a measured request: its own window counts, shrunk towards the population
    np.testing.assert_allclose(w.prefix_acceptance(), [(0 + S * 30 / 50) / (20 + S)])
    old = AcceptanceWindow(1, 20)  # population_drafts 0: the window's pooled rate, as before
    feed(old, "a", 1, 30)
    feed(old, "a", 0, 20)
    old.batch = ("b",)
    np.testing.assert_allclose(old.prefix_acceptance(), [0.0])


def test_the_population_keeps_the_latest_batches_that_hold_population_drafts():
    w = AcceptanceWindow(1, 4, population_drafts=6)
    for _ in range(5):
        w.observe([1, 1], [1, 1], ["a", "b"])  # 2 drafts a batch, all accepted
    for _ in range(2):
        w.observe([1, 1], [0, 0], ["a", "b"])  # then 4 missed
    # the oldest batches leave while the rest still hold 6 drafts: 3 batches, 2 of 6 drafts accepted
    assert w.population.drafts == 6 and w.population.batches == 3
    w.batch = ("c",)
    np.testing.assert_allclose(w.prefix_acceptance(), [2 / 6])
    w.observe([0, 0], [0, 0], ["a", "b"])  # a batch without drafts enters neither
    assert w.population.drafts == 6


def test_the_population_is_never_aged_and_a_request_aged_at_k0_reverts_to_it():
    w = AcceptanceWindow(1, 20, population_drafts=40)
    feed(w, "a", 1, 20)
    feed(w, "a", 0, 20)
    w.batch = ("a",)
    now, since, half = w.completed + 20, w.completed, 20.0  # every window batch half its weight
    pop = 20 / 40
    expect = wilson_upper(0.5 * 0 + S * pop, 0.5 * 20 + S, 1.0)
    assert w.aged_prefix_acceptance(1.0, now, since, half)[0] == pytest.approx(expect)
    far = w.aged_prefix_acceptance(0.0, w.completed + 2000, since, half)[0]
    assert far == pytest.approx(pop, abs=1e-6)  # own evidence all but gone: the population's rate


def test_population_drafts_0_keeps_the_window_s_pooled_estimates_bit_for_bit():
    a, b = AcceptanceWindow(3, 10), AcceptanceWindow(3, 10, population_drafts=0)
    rng = np.random.default_rng(7)
    for t in range(40):
        ids = [f"r{(t // 9 + j) % 5}" for j in range(2)]
        lens = [int(x) for x in rng.integers(0, 4, size=2)]
        acc = [int(rng.integers(0, L + 1)) for L in lens]
        a.observe(lens, acc, ids)
        b.observe(lens, acc, ids)
        a.batch = b.batch = ("r1", "r4")
        assert np.array_equal(a.prefix_acceptance(), b.prefix_acceptance())
        assert np.array_equal(a.prefix_acceptance(1.0, 0.5), b.prefix_acceptance(1.0, 0.5))
        assert np.array_equal(a.aged_prefix_acceptance(1.0, a.completed + 3, t // 2, 7.0),
                              b.aged_prefix_acceptance(1.0, b.completed + 3, t // 2, 7.0))


def test_the_controller_builds_its_window_with_the_policy_s_population_and_bad_values_are_refused():
    ctl = DraftStepController(3, StepPolicy(population_drafts=64), cost_ms=lambda b, k: 10.0 + k,
                              pad_requests=lambda B: 1)
    assert ctl.window.population is not None and ctl.window.population.min_drafts == 64
    with pytest.raises(ValueError, match="population_drafts"):
        StepPolicy(population_drafts=-1)
    with pytest.raises(ValueError, match="population_drafts"):
        AcceptanceWindow(2, 4, population_drafts=-5)
    with pytest.raises(ValueError):
        DraftStepPolicy(population_drafts=-1)


def _run(policy, rounds):
    """A k_max 1 controller (plain 10 ms, k = 1 11.7 ms, B = 1) fed `rounds` of (request, accepted when drafting):
    each round planned, then observed; returns the k planned per round."""
    table = {0: 10.0, 1: 11.7}
    ctl = DraftStepController(1, policy, cost_ms=lambda b, k: table.get(k), pad_requests=lambda B: 1,
                              probe_interval=0, cold_start="k_max")
    ks = []
    for rid, (request, accepted) in enumerate(rounds):
        k = ctl.plan(1, round_id=rid, requests=[request])
        ks.append(k)
        ctl.observe([k], [accepted if k else 0], round_id=rid)
    return ks


def test_at_one_request_a_newcomer_after_a_bad_ending_speculates_with_the_population_and_not_without():
    # "a" accepts 60% of its drafts for 100 rounds, then nothing for 30 (the controller goes plain); "b" then joins,
    # its drafts accepted 2 in 3
    rounds = [("a", int(i % 5 < 3)) for i in range(100)] + [("a", 0)] * 30 + [("b", 1), ("b", 1), ("b", 0)] * 10
    with_pop = _run(StepPolicy(population_drafts=64, served_costs=False), rounds)
    without = _run(StepPolicy(population_drafts=0, served_costs=False), rounds)
    assert with_pop[:100] == without[:100] == [1] * 100
    assert with_pop[129] == without[129] == 0  # both went plain on a's ending
    assert with_pop[130:] == [1] * 30  # b is priced at what requests accepted over the last 64 drafts: it speculates
    assert without[130:] == [0] * 30  # priced at a's last 20 misses, b stays plain (no probe in this test)
