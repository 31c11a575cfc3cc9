"""Ceiling pricing (adaptive/step_depth.py, adaspec's extension of R-C1, issue 13): with the confidence stop the draft
step's k is a ceiling, so a ceiling k is priced at the depth its drafts reach and a draft that stopped short counts as
missing the next position."""

from __future__ import annotations

import pytest

from adaspec.adaptive.feedback import AcceptanceWindow
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy
from adaspec.adaptive.step_depth import StopDepth, ceiling_table, reach
from adaspec.calibration.schema import DraftStepPolicy


def test_stop_depth_counts_stops_below_the_ceiling_only():
    """A draft that verified its whole ceiling is censored there (it might have gone on); one that ended below
    stopped. Rates past the deepest measured step carry forward; with nothing measured, full depth (q = 1)."""
    depth = StopDepth(4, window_size=10)
    assert depth.continuation() == (1.0, 1.0, 1.0)
    depth.observe([1, 1, 3, 3], [3, 3, 3, 3])  # two stopped at step 1, two reached the ceiling 3
    assert depth.continuation() == pytest.approx((0.5, 1.0, 1.0))  # step 3 unmeasured: step 2's rate carried
    depth.observe([1, 1, 1, 1], [1, 1, 1, 1])  # ceiling 1: censored at step 1, no information
    assert depth.continuation() == pytest.approx((0.5, 1.0, 1.0))
    depth.observe([0, 2], [3, 2])  # no draft; and one capped at 2 (its max_tokens): censored
    assert depth.continuation() == pytest.approx((3 / 5, 1.0, 1.0))


def test_stop_depth_window_forgets_old_batches():
    depth = StopDepth(3, window_size=2)
    depth.observe([1], [3])
    depth.observe([3], [3])
    depth.observe([3], [3])
    assert depth.continuation() == pytest.approx((1.0, 1.0))


def test_reach_and_the_ceiling_table():
    """P(D >= i) for the deepest of B requests; k = 0 and k = 1 keep the table's price, deeper k pay each further
    step in proportion to the chance the round's draft reaches it."""
    assert reach((0.5, 0.5), 1) == pytest.approx([1.0, 0.5, 0.25])
    assert reach((0.5, 0.5), 2) == pytest.approx([1.0, 0.75, 1 - 0.75 ** 2])
    table = {0: 10.0, 1: 12.0, 2: 16.0, 3: 20.0}
    assert ceiling_table(table, [1.0, 0.5, 0.25]) == pytest.approx({0: 10.0, 1: 12.0, 2: 14.0, 3: 15.0})
    assert ceiling_table(table, [1.0, 1.0, 1.0]) == table


def test_a_draft_stopped_short_of_its_ceiling_misses_the_next_position():
    """With ceilings, a draft that accepted all it verified below its ceiling reached the next position and did not
    yield it; without them (or at the ceiling) it is censored, as before."""
    w = AcceptanceWindow(3, window_size=10)
    w.observe([1, 3], [1, 3], ceilings=[3, 3])
    assert w.prefix_acceptance() == pytest.approx([1.0, 0.5, 0.5])
    old = AcceptanceWindow(3, window_size=10)
    old.observe([1, 3], [1, 3])
    assert old.prefix_acceptance() == pytest.approx([1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="ceilings"):
        w.observe([2], [1], ceilings=[1])


# A stream of drafts at ceiling 3, B = 1: half are confident (they draft to the ceiling, each position accepted
# with probability 0.8 given the earlier ones), half stop after step 1 (accepted with probability 0.5). In exact
# proportions, 2000 drafts in batches of 20.
CONFIDENT = [(3, 0)] * 200 + [(3, 1)] * 160 + [(3, 2)] * 128 + [(3, 3)] * 512  # (verified, accepted)
UNCONFIDENT = [(1, 0)] * 500 + [(1, 1)] * 500
TABLE = {0: 10.0, 1: 12.0, 2: 16.0, 3: 20.0}


def _true_throughput(k: int) -> float:
    """Tokens per ms of a ceiling-k round in that stream."""
    tokens = 1 + 0.5 * sum(0.8 ** i for i in range(1, k + 1)) + 0.5 * 0.5 * (k >= 1)
    cost = TABLE[0] if k == 0 else TABLE[1] + 0.5 * (TABLE[k] - TABLE[1])
    return tokens / cost


def _fed(ceiling_pricing: bool) -> DraftStepController:
    ctrl = DraftStepController(3, StepPolicy(window_size=100, ceiling_pricing=ceiling_pricing),
                               lambda bcap, k: TABLE.get(k), lambda b: 1, cold_start="k_max")
    drafts = CONFIDENT + UNCONFIDENT
    drafts = [drafts[i] for i in sorted(range(len(drafts)), key=lambda i: (i * 7919) % len(drafts))]  # mixed
    for start in range(0, len(drafts), 20):
        lens, acc = zip(*drafts[start:start + 20])
        ctrl.observe(list(lens), list(acc), ceilings=[3] * 20)
    ctrl.plan(1)
    return ctrl


def test_ceiling_pricing_predicts_what_each_ceiling_yields():
    """The controller's predicted tokens per ms of every ceiling equals the stream's true one, and it chooses the
    right ceiling (2) as its best; priced at full depth with acceptance among the drafts that reached each position, it
    rates k = 1 above k = 2."""
    ctrl = _fed(True)
    d = ctrl.decisions[-1]
    for k in range(4):
        assert d.predicted[k] == pytest.approx(_true_throughput(k), rel=1e-9)
    best = max(d.predicted, key=d.predicted.get)
    assert best == 2 == max(range(4), key=_true_throughput)
    full = _fed(False).decisions[-1]
    assert max(full.predicted, key=full.predicted.get) == 1
    assert abs(full.predicted[3] / _true_throughput(3) - 1) > 0.05


def test_ceiling_pricing_off_ignores_ceilings():
    ctrl = _fed(False)
    assert ctrl.depth.continuation() == (1.0, 1.0) and ctrl._continuation is None
    assert "off" in ctrl.describe_depth()
    assert DraftStepPolicy(ceiling_pricing=False).ceiling_pricing is False
