"""The adaptive draft step in a closed batch (adaptive/closed_step.py; issue 13, adaspec's extension of R-C1):
hand-computed makespans, the reduction to R-C1's score, and the controller using it."""

from __future__ import annotations

import pytest

from adaspec.adaptive.closed_step import closed_throughput
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy, step_throughput

# the bundled model's step table on this project's CPU (bench/results/s41/dense_step_table.md), k = 0, 1
TABLES = {1: {0: 27.05, 1: 29.52}, 2: {0: 28.03, 1: 35.51}, 3: {0: 30.67, 1: 41.17}, 4: {0: 35.39, 1: 54.70}}


def test_equal_requests_reduce_to_the_per_round_score():
    """Every request at the batch's acceptance and length: all finish together, so the score is R-C1's."""
    closed = [(100, 1.0)] * 4
    for k in (0, 1):
        assert closed_throughput([0.6], k, closed, TABLES.get) == pytest.approx(
            step_throughput(4, [0.6], k, TABLES[4][k]))


def test_the_makespan_by_hand():
    """Two requests of 100 tokens, one accepting twice the other's rate: at k = 1 with a = 0.5 they advance
    1.25 and 1.75 tokens per round, finish after 57.14 and 80 rounds; 57.14 rounds of two requests, then
    22.86 of one."""
    closed = [(100, 0.5), (100, 1.5)]
    t_ms = (100 / 1.75) * TABLES[2][1] + (80 - 100 / 1.75) * TABLES[1][1]
    assert closed_throughput([0.5], 1, closed, TABLES.get) == pytest.approx(200 / t_ms)
    assert closed_throughput([0.5], 0, closed, TABLES.get) == pytest.approx(200 / (100 * TABLES[2][0]))
    # acceptance is capped at k: a request cannot accept more draft tokens than were drafted
    assert closed_throughput([0.9], 1, [(100, 3.0), (100, 3.0)], TABLES.get) == pytest.approx(
        200 / (50 * TABLES[2][1]))


def test_the_drain_turns_the_mixed_batch_against_k1():
    """Stop 41's measured closed batch: four mixed prompts at k = 1 finished after 188, 185, 133 and 151 rounds
    (256 tokens each): rates 1.36-1.92, mean acceptance 0.59. R-C1's score says k = 1 pays ~3%; the batch's
    remaining work says it loses (measured: 0.95x plain)."""
    rates = [256 / r for r in (188, 185, 133, 151)]
    a = sum(r - 1 for r in rates) / 4
    closed = [(256, (r - 1) / a) for r in rates]
    assert step_throughput(4, [a], 1, TABLES[4][1]) > step_throughput(4, [a], 0, TABLES[4][0])
    assert closed_throughput([a], 1, closed, TABLES.get) < closed_throughput([a], 0, closed, TABLES.get)


def _controller(closed_batch: bool) -> DraftStepController:
    policy = StepPolicy(update_interval=5, switch_min_gain=0.05, closed_batch=closed_batch, zero_confidence=0.0)
    return DraftStepController(1, policy, lambda b, k: TABLES.get(b, {}).get(k), lambda b: b if b <= 4 else None,
                               buckets=(1, 2, 3, 4), cold_start="k_max", probe_interval=0)


@pytest.mark.parametrize("closed_batch", [True, False])
def test_the_controller_scores_a_closed_batch_by_its_remaining_work(closed_batch):
    """A batch of four where two requests accept almost everything and two almost nothing (average 0.6): per
    round k = 1 pays (1.6 x 35.39 / 54.70 = 1.035x, kept inside the 5% hysteresis), but with nothing waiting the
    slow pair sets the batch's end, and the controller leaves k = 1 for plain."""
    ctrl = _controller(closed_batch)
    closed = [(200, 1.6), (200, 1.6), (200, 0.4), (200, 0.4)]
    for i in range(10):
        assert ctrl.plan(4, closed=closed) in (0, 1)
        ctrl.observe([1] * 4, [1, 1, int(i % 4 == 0), 0])  # 0.6 per draft on average (0.575 here)
    assert ctrl.k == (0 if closed_batch else 1)
    assert ctrl.plan(4, closed=None) == ctrl.k  # a request waiting: R-C1's score, the same table, no re-score


def test_the_engine_gives_each_request_its_remaining_tokens_and_relative_acceptance():
    """engine/control.py's closed-batch view: None while a request waits (or for one request); else per
    decoding request (max_tokens - generated, its accepted per verified draft token over the batch's, shrunk
    towards 1 by CLOSED_SHRINK_TOKENS)."""
    from types import SimpleNamespace

    from adaspec.engine.control import AdaptiveControl

    def req(generated, drafted, accepted):
        return SimpleNamespace(params=SimpleNamespace(max_tokens=100), output_token_ids=[0] * generated,
                               num_draft_tokens=drafted, num_accepted_tokens=accepted)

    ctl = object.__new__(AdaptiveControl)
    ctl.step = SimpleNamespace(policy=StepPolicy(closed_batch=True))
    batch = [req(10, 40, 30), req(20, 40, 10), req(0, 0, 0)]
    ctl.engine = SimpleNamespace(scheduler=SimpleNamespace(waiting=[object()]))
    assert ctl._closed_batch(batch) is None
    ctl.engine.scheduler.waiting = []
    assert ctl._closed_batch(batch[:1]) is None
    s, mean = AdaptiveControl.CLOSED_SHRINK_TOKENS, 40 / 80
    got = ctl._closed_batch(batch)
    ctl.step.policy = StepPolicy(closed_batch=False)  # off: nothing computed
    assert ctl._closed_batch(batch) is None
    assert [n for n, _ in got] == [90, 80, 100]
    assert [rho for _, rho in got] == pytest.approx([(30 + s * mean) / (40 + s) / mean,
                                                     (10 + s * mean) / (40 + s) / mean, 1.0])


def test_a_relative_acceptance_per_depth_prices_each_k_at_its_own_ratio():
    """rho given per depth (the controller's per-request window, stop 43): k uses rho[k - 1]; a request at
    0.5x the batch's first position and 0.25x its first two advances 1 + 0.25 (0.8 + 0.4) at k = 2."""
    closed = [(100, (0.5, 0.25)), (100, (1.5, 1.75))]
    a = [0.8, 0.4]
    slow, fast = 1 + 0.25 * 1.2, 1 + min(2.0, 1.75 * 1.2)
    t2 = {1: {2: 1.0}, 2: {2: 2.0}}
    assert closed_throughput(a, 2, closed, t2.get) == pytest.approx(
        200 / ((100 / fast) * 2.0 + (100 / slow - 100 / fast) * 1.0))
    assert closed_throughput(a, 1, closed, TABLES.get) == closed_throughput(a, 1, [(100, 0.5), (100, 1.5)], TABLES.get)


def test_the_controller_takes_each_requests_depth_profile_from_its_window():
    """With per-request estimates the closed view's rho comes from the window, per depth: two requests that
    accept everything and two that accept nothing (16 drafts each of 2 positions) give rho(1) = a_i1 / mean and
    rho(2) = (a_i1 + a_i2) / mean, whatever relative acceptance the engine passed. With fewer than
    CLOSED_MIN_DRAFTS drafts for a request the view is empty: the per-round score."""
    from adaspec.adaptive.batch_acceptance import SHRINK_DRAFTS as S
    from adaspec.adaptive.step_policy import CLOSED_MIN_DRAFTS

    ctrl = DraftStepController(2, StepPolicy(closed_batch=True, window_size=20), lambda b, k: 10.0 + k, lambda b: b,
                               cold_start="k_max", probe_interval=0)
    ids = ["a", "b", "c", "d"]
    n = CLOSED_MIN_DRAFTS
    for i in range(n):
        if i == n - 1:  # one draft short
            ctrl.plan(4, round_id=i, requests=ids, closed=[(50, 1.0)] * 4)
            assert ctrl._closed_by_depth(ctrl._closed) == ()
            assert ctrl.throughput(4, [0.5, 0.5], 1, {0: 10.0, 1: 11.0}) == step_throughput(4, [0.5, 0.5], 1, 11.0)
        else:
            ctrl.plan(4, round_id=i, requests=ids)
        ctrl.observe([2] * 4, [2, 2, 0, 0], round_id=i)
    ctrl.plan(4, round_id=n, requests=ids, closed=[(50, 1.0)] * 4)
    hi1 = (n + S * 0.5) / (n + S)  # pooled: position 1 at 2n/4n, position 2 at 2n/2n
    lo1 = (0 + S * 0.5) / (n + S)
    hi, lo = [hi1, hi1 + hi1 * 1.0], [lo1, lo1 + lo1 * 1.0]
    mean = [(h + l) / 2 for h, l in zip(hi, lo)]
    got = ctrl._closed_by_depth(ctrl._closed)  # what the scores use (computed when one first needs it)
    assert [n for n, _ in got] == [50] * 4
    for (_, rho), prof in zip(got, (hi, hi, lo, lo)):
        assert rho == pytest.approx([p / m for p, m in zip(prof, mean)])
