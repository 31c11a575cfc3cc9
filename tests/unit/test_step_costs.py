"""Pricing a batch between two calibrated request buckets (adaptive/step_costs.py; issue 13's staggered
cell, R-C1/R-C3 with adaspec's interpolation): hand-computed tables, the fallbacks to bucket pricing,
and the controller following the batch's request count."""

from __future__ import annotations

import pytest

from adaspec.adaptive.step_controller import DraftStepController, StepPolicy
from adaspec.adaptive.step_costs import StepCostTables, interpolate_tables

# k = 1 adds 5% to a plain round at one request and 60% at four (the shape measured on the CPU)
COSTS = {1: {0: 10.0, 1: 10.5}, 4: {0: 20.0, 1: 32.0}}
BUCKETS = (1, 4)


def cost_ms(bcap, k):
    return COSTS.get(bcap, {}).get(k)


def pad(b):
    return next((x for x in BUCKETS if x >= b), None)


def test_interpolation_is_linear_in_the_request_count():
    t = interpolate_tables(2, 1, COSTS[1], 4, COSTS[4])
    assert t == pytest.approx({0: 10.0 + 10.0 / 3, 1: 10.5 + 21.5 / 3})
    with pytest.raises(ValueError, match="lo < b < hi"):
        interpolate_tables(4, 1, COSTS[1], 4, COSTS[4])
    with pytest.raises(ValueError, match="differ"):
        interpolate_tables(2, 1, {1: 1.0}, 4, COSTS[4])


def test_a_batch_is_priced_between_its_buckets_and_at_a_bucket_exactly():
    tables = StepCostTables(1, cost_ms, buckets=BUCKETS)
    four, _ = tables.bucket(4)
    assert four == COSTS[4]
    assert tables.for_batch(4, 4, four) is four  # a calibrated bucket: its own table
    assert tables.for_batch(3, 4, four) == pytest.approx({0: 10.0 + 10.0 * 2 / 3, 1: 10.5 + 21.5 * 2 / 3})
    assert tables.for_batch(3, 4, four) is tables.for_batch(3, 4, four)  # cached: the controller compares identity


@pytest.mark.parametrize("why", ["no bucket below", "lower bucket outside the KV range", "lower bucket lacks k = 0",
                                 "not asked to"])
def test_bucket_pricing_where_no_interpolation_is_sound(why):
    costs = {b: dict(t) for b, t in COSTS.items()}
    buckets, covers = BUCKETS, None
    if why == "no bucket below":
        buckets = (4,)
    elif why == "lower bucket outside the KV range":
        covers = lambda bcap, kv: bcap != 1 or kv is None or kv <= 100  # noqa: E731
    elif why == "lower bucket lacks k = 0":
        del costs[1][0]
    elif why == "not asked to":
        buckets = None
    tables = StepCostTables(1, lambda b, k: costs.get(b, {}).get(k), buckets=buckets, covers=covers)
    four, _ = tables.bucket(4)
    assert tables.for_batch(2, 4, four, kv_len=500) is four


def controller(interpolate: bool) -> DraftStepController:
    policy = StepPolicy(window_size=20, update_interval=5, switch_min_gain=0.05, interpolate_buckets=interpolate)
    return DraftStepController(1, policy, cost_ms, pad, buckets=BUCKETS, probe_interval=0)


@pytest.mark.parametrize("interpolate", [True, False])
def test_k_follows_the_request_count_when_requests_leave(interpolate):
    """Acceptance 0.5 at position 1: k = 1 pays 1.5 / 1.05 at one request, loses (1.5 / 1.6) at four, and at
    two requests pays 1.5 / 1.325 priced in between, loses priced at four. When the batch shrinks from four to
    two, the controller re-scores at once (not at the next interval) and, interpolating, leaves k = 0."""
    ctrl = controller(interpolate)
    ctrl.plan(4)
    for _ in range(10):  # at four requests, half the drafted tokens accepted: k = 0 is right
        ctrl.observe([1, 1, 1, 1], [1, 0, 1, 0])
        ctrl.plan(4)
    assert ctrl.k == 0
    decided = len(ctrl.decisions)
    assert ctrl.plan(2) == (1 if interpolate else 0)
    if interpolate:  # decided for the two-request batch, before any interval passed
        assert len(ctrl.decisions) == decided + 1 and ctrl.decisions[-1].batch_size == 2
        assert ctrl.plan(4) == 0  # and back to plain when the batch is full again
        assert ctrl.decisions[-1].batch_size == 4
    else:  # priced at bucket 4 the two-request batch is the same decision: nothing to re-score
        assert len(ctrl.decisions) == decided


def test_a_change_in_the_request_count_resets_the_exploration_backoff():
    """The looks that backed exploration off were judged on one request count's table; when requests leave
    (or join), the batch is priced anew and explored at the base rate again."""
    dear = {4: {0: 10.0, 1: 20.0}, 1: {0: 8.0, 1: 16.0}, 2: {0: 9.0, 1: 18.0}}
    ctrl = DraftStepController(1, StepPolicy(update_interval=5, zero_confidence=0.0),
                               lambda b, k: dear.get(b, {}).get(k), pad, buckets=BUCKETS, probe_interval=10,
                               cold_start="k_max")
    for i in range(200):  # nothing accepted at four requests: probes that find plain right back off
        k = ctrl.plan(4, round_id=i, requests=["a", "b", "c", "d"])
        ctrl.observe([k] * 4, [0] * 4, round_id=i)
    assert ctrl.backoff > 1
    ctrl.plan(2, round_id=200, requests=["a", "b"])  # two leave: priced between buckets 1 and 4
    assert ctrl.backoff == 1
