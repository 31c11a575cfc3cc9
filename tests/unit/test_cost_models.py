"""Whole-round cost models (R-F1, R-C3): fits on synthetic timings with known coefficients, SPS
interpolation and monotonicity, the unconnected-grid refusal, held-out accuracy, immutability."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from adaspec.calibration.cost_models import AdditiveModel, SpsModel, fit_model, model_from_dict
from adaspec.calibration.cost_points import CostModelError, CostPoint, as_points, grid_components
from adaspec.calibration.heldout import heldout_error

W = 5
BCAPS = (1, 2, 4, 8)


def ladder(b: int, w: int = W) -> list[int]:
    """Split-layout target rows: multiples of Bcap up to full width Bcap*(w+1)."""
    return list(range(b, b * (w + 1) + 1, b))


TRUE_BIAS = 0.004
TRUE_ALPHA = {1: 0.0, 2: 0.0011, 4: 0.0023, 8: 0.0050}


def true_theta(g: int) -> float:
    # per-row verify cost with a staircase cliff above 16 rows (relative to G = 1)
    return 0.00025 * (g - 1) + (0.002 if g > 16 else 0.0)


def synthetic(noise: float = 0.0, windows: int = 3, seed: int = 0) -> list[CostPoint]:
    rng = np.random.default_rng(seed)
    pts = []
    for b in BCAPS:
        for g in ladder(b):
            c = TRUE_BIAS + TRUE_ALPHA[b] + true_theta(g)
            for _ in range(windows):
                pts.append(CostPoint(b, g, c * (1 + noise * rng.standard_normal())))
    return pts


# ----------------------------------------------------------------------------- additive

def test_additive_recovers_exact_coefficients_without_noise():
    """R-F1: cost = bias + alpha(Bcap) + theta(G); reference coding alpha[first]=theta[first]=0."""
    m = AdditiveModel.fit(synthetic(noise=0.0))
    assert m.bias_s == pytest.approx(TRUE_BIAS, abs=1e-12)
    assert m.alpha_s[0] == 0.0 and m.theta_s[0] == 0.0 and m.x_values[0] == 1
    for b in BCAPS:
        assert m.alpha(b) == pytest.approx(TRUE_ALPHA[b], abs=1e-12)
    for g in m.x_values:
        assert m.theta(g) == pytest.approx(true_theta(g), abs=1e-12)
    assert m.residual_rms_s < 1e-12


def test_additive_recovers_coefficients_with_noise():
    """R-F1: least squares on noisy (3% per window) timings recovers the known coefficients."""
    m = AdditiveModel.fit(synthetic(noise=0.03, seed=1))
    assert m.bias_s == pytest.approx(TRUE_BIAS, abs=4e-4)
    for b in BCAPS:
        assert m.alpha(b) == pytest.approx(TRUE_ALPHA[b], abs=4e-4)
    for b in BCAPS:
        for g in ladder(b):
            truth = 1000 * (TRUE_BIAS + TRUE_ALPHA[b] + true_theta(g))
            assert m.cost_ms(b, g) == pytest.approx(truth, rel=0.04)


def test_additive_coverage_and_theta_interpolation():
    """R-F7: None outside coverage; an unmeasured G between measured ones interpolates theta."""
    pts = [(b, g, TRUE_BIAS + TRUE_ALPHA[b] + 0.001 * g) for b in (1, 2) for g in (2, 6)]
    m = AdditiveModel.fit(pts)
    assert m.cost_ms(1, 4) == pytest.approx(1000 * (TRUE_BIAS + 0.004), rel=1e-9)
    assert m.cost_ms(3, 4) is None  # request bucket never measured
    assert m.cost_ms(1, 1) is None and m.cost_ms(1, 7) is None  # G outside the measured range


def test_additive_nonpositive_prediction_is_uncovered():
    m = AdditiveModel(bias_s=0.001, bcaps=(1, 2), alpha_s=(0.0, -0.005), x_values=(1, 2), theta_s=(0.0, 0.001))
    assert m.cost_ms(1, 1) == pytest.approx(1.0)
    assert m.cost_ms(2, 1) is None


def test_additive_refuses_unconnected_grid_naming_buckets():
    """R-F1: the additive grid must be connected through shared G values."""
    pts = [(1, 1, 0.01), (1, 2, 0.011), (2, 2, 0.012), (8, 16, 0.03), (8, 32, 0.04), (16, 32, 0.05)]
    with pytest.raises(CostModelError) as e:
        AdditiveModel.fit(pts)
    msg = str(e.value)
    assert "not connected" in msg
    assert "Bcap [1, 2] with G [1, 2]" in msg and "Bcap [8, 16] with G [16, 32]" in msg
    assert "sps" in msg  # the fix
    # sps does not need connectivity
    assert SpsModel.fit(pts).cost_ms(8, 16) == pytest.approx(30.0)


def test_grid_components():
    assert grid_components([(1, 1), (2, 1), (4, 8)]) == [((1, 2), (1,)), ((4,), (8,))]
    assert len(grid_components([(b, g) for b in BCAPS for g in ladder(b)])) == 1


# ----------------------------------------------------------------------------- sps

def test_sps_median_of_inverse_cost_pooled_across_buckets():
    """R-F1: SPS(G) = median of 1/cost over the points at G; cost = 1000 / SPS(G) ms."""
    pts = [(1, 4, 0.010), (2, 4, 0.011), (4, 4, 0.500), (1, 8, 0.020)]  # 0.5 s is an outlier window
    m = SpsModel.fit(pts)
    assert m.x_values == (4, 8)
    assert m.sps[0] == pytest.approx(np.median([100.0, 1 / 0.011, 2.0]))
    assert m.cost_ms(2, 4) == pytest.approx(1000 / m.sps[0])
    assert m.steps_per_second(1, 8) == pytest.approx(50.0)
    assert m.cost_ms(1, 4) == m.cost_ms(2, 4)  # a function of G only


def test_sps_interpolates_cost_and_is_uncovered_outside():
    m = SpsModel.fit([(1, 2, 0.010), (1, 6, 0.018)])
    assert m.cost_ms(1, 4) == pytest.approx(14.0)  # linear in cost between measured G
    assert m.cost_ms(1, 1) is None and m.cost_ms(1, 7) is None
    assert m.cost_ms(2, 4) is None  # request bucket never measured


def test_sps_cost_is_forced_monotone_keeping_cliffs():
    """R-F1: cost non-decreasing in G (a noisy inversion is pooled; a real cliff stays)."""
    pts = [(1, 1, 0.010), (1, 2, 0.012), (1, 4, 0.011), (1, 8, 0.030), (1, 16, 0.031)]
    m = SpsModel.fit(pts)
    assert all(b >= a for a, b in zip(m.cost_s, m.cost_s[1:]))
    assert m.cost_s[1] == pytest.approx(0.0115) and m.cost_s[2] == pytest.approx(0.0115)
    assert m.cost_s[3] == pytest.approx(0.030)  # the cliff
    assert m.cost_ms(1, 3) == pytest.approx(11.5)


def test_sps_per_bucket_curves_for_draft_steps():
    """R-C3: with step counts k on the second axis every (Bcap, k) keeps its own measured cost."""
    pts = [(b, k, 0.002 * b + 0.001 * k) for b in (1, 8) for k in (1, 2, 3)]
    pooled, per = SpsModel.fit(pts), SpsModel.fit(pts, per_bucket=True)
    assert per.cost_ms(8, 2) == pytest.approx(18.0) and per.cost_ms(1, 2) == pytest.approx(4.0)
    assert pooled.cost_ms(8, 2) == pooled.cost_ms(1, 2)  # pooled over buckets: k alone
    assert per.cost_ms(2, 2) is None and per.curve(8).x_values == (1, 2, 3)
    assert model_from_dict(json.loads(json.dumps(per.to_dict()))) == per
    with pytest.raises(AttributeError, match="curve"):
        per.x_values
    r = heldout_error(pts, "sps", "k", per_bucket=True)
    assert r.evaluated == 2 and r.median_rel_error == pytest.approx(0.0, abs=1e-12)


def test_sps_per_bucket_inversion_moves_the_disturbed_step_count():
    """R-F1 robust fit (issue 13): per bucket, an inversion is resolved by precision, not by window count: a
    k = 1 whose windows spread 30% above a consistent k = 2 takes k = 2's cost, k = 2 keeps its own; the pooled
    curve (adaptive verify, where buckets differ for real) still pools by count."""
    k0, k1, k2, k3 = [0.0165] * 3, [0.0198, 0.0259, 0.0270], [0.0224, 0.0227, 0.0230], [0.0252, 0.0256, 0.0260]
    pts = [(1, k, c) for k, cs in enumerate((k0, k1, k2, k3)) for c in cs]
    per = SpsModel.fit(pts, per_bucket=True)
    assert per.cost_ms(1, 2) == pytest.approx(22.7, rel=0.005)  # the precise neighbour holds
    assert per.cost_ms(1, 1) == pytest.approx(per.cost_ms(1, 2), rel=0.01)  # the disturbed one moves to it
    assert per.cost_ms(1, 0) == pytest.approx(16.5) and per.cost_ms(1, 3) == pytest.approx(25.6, rel=0.005)
    pooled = SpsModel.fit(pts)  # by count: the two meet halfway
    assert pooled.cost_ms(1, 1) == pytest.approx(pooled.cost_ms(1, 2)) and 23.5 < pooled.cost_ms(1, 1) < 25.0
    # windows that agree exactly do not get unbounded weight: the spread floor keeps the fit finite and between
    exact = [(1, 1, 0.030)] * 3 + [(1, 2, 0.020)] * 3
    c = SpsModel.fit(exact, per_bucket=True).curve(1).cost_s
    assert c[0] == pytest.approx(c[1]) and c[0] == pytest.approx(0.025)  # equal floors: equal weights


def test_sps_recovers_known_curve_with_noise():
    pts = [(b, g, (0.005 + 0.0004 * g) * (1 + 0.03 * n))
           for b in (1, 2) for g in (2, 4, 6, 8) for n in np.random.default_rng(3).standard_normal(5)]
    m = SpsModel.fit(pts)
    for g in (2, 4, 6, 8):
        assert m.cost_ms(1, g) == pytest.approx(1000 * (0.005 + 0.0004 * g), rel=0.03)


# ----------------------------------------------------------------------------- held-out error

def test_heldout_error_additive_on_synthetic_data():
    """R-F1 held-out report: leave one (Bcap, G) cell out, refit, median relative error."""
    pts = synthetic(noise=0.02, seed=2)
    r = heldout_error(pts, "additive")
    n_cells = sum(len(ladder(b)) for b in BCAPS)
    assert r.evaluated + r.skipped == n_cells
    assert r.median_rel_error is not None and r.median_rel_error < 0.05
    assert r.skipped_uncovered >= 1  # e.g. G = 1 (only Bcap 1) and the largest G are outside the rest
    d = r.to_dict()
    assert json.loads(json.dumps(d))["median_rel_error"] == pytest.approx(r.median_rel_error)
    assert "held-out median relative error" in r.summary()


def test_heldout_skips_and_counts_cells_whose_removal_disconnects():
    # a tree-shaped grid: every cell is a bridge, so every removal disconnects it (or loses a bucket)
    pts = [(1, 1, 0.01), (1, 2, 0.011), (2, 2, 0.012), (2, 4, 0.013)]
    r = heldout_error(pts, "additive")
    assert r.evaluated == 0 and r.median_rel_error is None
    assert r.skipped_disconnected >= 1
    assert r.skipped_disconnected + r.skipped_uncovered == 4


def test_heldout_sps_interior_cells():
    pts = [(1, g, 0.01 + 0.001 * g) for g in (1, 2, 3, 4, 5)]
    r = heldout_error(pts, "sps")
    assert r.evaluated == 3 and r.skipped_uncovered == 2  # the two end G have no neighbour on one side
    assert r.median_rel_error == pytest.approx(0.0, abs=1e-12)


# ----------------------------------------------------------------------------- plumbing

@pytest.mark.parametrize("kind", ["additive", "sps"])
def test_to_dict_roundtrip_and_frozen(kind):
    m = fit_model(synthetic(noise=0.01), kind)
    d = json.loads(json.dumps(m.to_dict()))
    m2 = model_from_dict(d)
    assert m2 == m
    assert m2.cost_ms(4, 12) == pytest.approx(m.cost_ms(4, 12))
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.kind = "x"


def test_invalid_inputs():
    with pytest.raises(CostModelError, match="no measured points"):
        AdditiveModel.fit([])
    with pytest.raises(CostModelError, match="cost_s"):
        as_points([(1, 2, -0.1)])
    with pytest.raises(CostModelError, match="integers"):
        as_points([(1, 2.5, 0.1)])
    with pytest.raises(CostModelError, match="unknown cost model"):
        fit_model([(1, 1, 0.1)], "linear")
    with pytest.raises(CostModelError, match="unknown cost model kind"):
        model_from_dict({"kind": "cubic"})
    with pytest.raises(CostModelError, match="cost_s must not decrease"):
        SpsModel.from_dict({"bcaps": [1], "curves": [{"x_values": [1, 2], "sps": [1, 2], "cost_s": [2.0, 1.0]}]})


def test_points_accept_objects_with_x_or_g():
    class P:  # like adaspec.engine.calibrate.Point
        def __init__(self, bcap, x, cost_s, kv_len):
            self.bcap, self.x, self.cost_s, self.kv_len = bcap, x, cost_s, kv_len

    pts = as_points([P(2, 4, 0.01, 2100), (1, 2, 0.02)])
    assert pts[0] == CostPoint(2, 4, 0.01, 2100) and pts[0].g == 4
    assert pts[1].kv_len is None
