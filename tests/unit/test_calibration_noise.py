"""Calibration on a busy machine and its report (issue 13, R-F2, R-F7).

The timing logic runs with a scripted clock (window costs chosen by the test), on the tiny target
with a real DSpark draft (so the shared-prefill, fork and rewind path is the one exercised):
- consistent windows: a burst that hits fewer than `windows_per_point` windows is ignored;
- a point whose windows disagree beyond the tolerance is measured again, from the same cached
  state, at most `max_remeasures` times and within the extra-round budget; what stays noisy is
  flagged unresolved;
- the report: each point's spread, the noise summary (with the share of time other processes took),
  and one warning line that tells noise from a model that does not fit;
- the ETA prices remaining rounds by what was measured; the sparse CPU geometry and its reason.
"""

from __future__ import annotations

import json

import pytest
import torch

from adaspec.calibration.robust import (NoisePolicy, PointStats, consistent_windows, drift_factors, drift_lines,
                                        noise_summary, spread_lines, trust_warning)
from adaspec.engine import calibrate
from adaspec.engine.calibrate import measure, rows_plan
from adaspec.engine.calibration_progress import RoundProgress, eta_seconds, predict_cost
from adaspec.engine.llm_engine import LLM
from adaspec.geometry import choose_prepared
from test_request_fork import _draft

WINDOW = 2


class ScriptedClock:
    """Window costs from a script (seconds per round); wall time twice the CPU time (50% stolen)."""

    cpu, name = True, "scripted"

    def __init__(self, script):
        self.script = list(script)
        self.used = 0

    def now(self):
        return (0.0, 0.0)

    def cost(self, t0, t1):
        c = self.script[self.used] * WINDOW
        self.used += 1
        return c, 2 * c


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    return LLM(str(tiny_llama_dir), drafter=_draft("dspark", tiny_llama_dir), speculative_algorithm="DSpark",
               num_speculative_tokens=5, max_seqs_per_batch=4, max_num_batched_tokens=64, max_model_len=256).engine


def _measure(engine, monkeypatch, script, grid=None, noise=None):
    clock = ScriptedClock(script)
    monkeypatch.setattr(calibrate, "Clock", lambda eng: clock)
    m = measure(engine, grid or {1: [1]}, lambda b, g: rows_plan(b, g, 5), [(16, 1, 200)], 1, WINDOW, 3, 1,
                lambda b, g: 6, noise=noise or NoisePolicy(), width=5)
    assert not engine.scheduler.has_unfinished()  # every synthetic request is gone again
    return m, clock


def test_consistent_windows_ignore_a_burst():
    assert consistent_windows([1.0, 1.6, 1.02], 2) == ([0, 2], pytest.approx(0.02 / 1.01))
    idx, spread = consistent_windows([1.5, 1.0, 1.01, 1.9, 1.0, 0.99], 3)
    assert idx == [1, 4, 5] and spread == pytest.approx(0.01)


def test_a_disagreeing_point_is_measured_again(engine, monkeypatch):
    m, clock = _measure(engine, monkeypatch, [1.0, 1.0, 1.6, 1.01, 0.99, 1.0])
    assert m.shared_prefill and clock.used == 6
    (st,) = m.stats
    assert st.remeasures == 1 and st.resolved and st.spread <= 0.1
    assert m.extra_rounds == 3 * WINDOW and m.extra_rounds <= m.extra_allowed
    assert [p.cost_s for p in m.points] == [1.0, 1.0, 1.0]  # the consistent windows (1.0, 1.0, 1.0) of six
    assert st.steal == pytest.approx(0.5)


def test_remeasuring_is_bounded(engine, monkeypatch):
    noisy = [1.0, 1.5, 2.0, 1.2, 1.7, 2.2, 1.4, 1.9, 2.4]  # no three agree within 10%
    m, clock = _measure(engine, monkeypatch, noisy, noise=NoisePolicy(extra_fraction=10.0))
    (st,) = m.stats  # per point: at most max_remeasures extra sets
    assert st.remeasures == NoisePolicy().max_remeasures and not st.resolved and clock.used == 9
    m, clock = _measure(engine, monkeypatch, noisy)  # the table's budget (here one set) binds first
    assert m.stats[0].remeasures == 1 and m.extra_rounds == m.extra_allowed == 3 * WINDOW
    # a table-wide budget of 0 extra rounds: nothing is measured again, the point stays unresolved
    m, clock = _measure(engine, monkeypatch, noisy, noise=NoisePolicy(extra_fraction=0.0))
    assert m.stats[0].remeasures == 0 and clock.used == 3 and not m.stats[0].resolved


def test_every_point_of_the_grid_is_timed_from_the_cached_state(engine, monkeypatch):
    grid = {1: [1, 4], 2: [2, 6]}
    script = [0.05, 0.05, 0.05, 0.08, 0.08, 0.08, 0.05,  # bucket 1, then its first point again (one window agrees)
              0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.1]
    m, clock = _measure(engine, monkeypatch, script, grid)
    assert clock.used == len(script)
    assert [(s.bcap, s.x) for s in m.stats] == [(1, 1), (1, 4), (2, 2), (2, 6)]
    assert [(d.bcap, d.x, d.rel, d.corrected) for d in m.drifts] == [(1, 1, 0.0, False), (2, 2, 0.0, False)]
    firsts = {m.points[i].kv_len for i in range(0, len(m.points), 3)}
    assert len(firsts) == 1  # every point's first window starts at the same KV length: rewound, not re-prefilled
    lines = spread_lines(m.stats)
    assert lines[0].startswith("  Bcap 1: G 1 50.0 ms ±0.0%") and "G 6 200.0 ms" in lines[1]


def test_drift_factors_are_linear_in_time_between_the_reference_measurements():
    assert drift_factors([0.0, 5.0, 10.0, 12.0, -1.0], 0.0, 10.0, 0.2) == pytest.approx([1.0, 1.1, 1.2, 1.2, 1.0])
    assert drift_factors([3.0], 2.0, 2.0, 0.5) == [1.0]  # no time between them: nothing to interpolate


def test_drift_between_points_is_corrected_and_reported(engine, monkeypatch):
    """Issue 13: every point's windows agree, but the machine slowed down by 20% between the bucket's
    first point and its re-measurement after the last one. The later point is divided by the drift
    at its time, so the bucket is priced at one machine speed, and the log says what moved."""
    grid = {2: [2, 6]}
    m, clock = _measure(engine, monkeypatch, [1.0] * 3 + [1.5] * 3 + [1.2] * 3, grid)
    assert clock.used == 9
    (d,) = m.drifts
    assert (d.bcap, d.x, d.before_s, d.after_s, d.corrected) == (2, 2, 1.0, 1.2, True)
    assert d.rel == pytest.approx(0.2)
    first = [p.cost_s for p in m.points if p.x == 2]
    later = [p.cost_s for p in m.points if p.x == 6]
    assert first == [1.0, 1.0, 1.0]  # the reference's first measurement defines the bucket's speed
    assert 1.5 / 1.2 <= later[0] < 1.5 and len(set(later)) == 1  # divided by the drift at its time
    assert m.stats[1].cost_s == pytest.approx(later[0])  # the log's figures are the corrected ones
    assert m.rounds == 2 * (1 + 3 * WINDOW) + 1 + 3 * WINDOW  # warm-up + windows per point, then the reference
    (line,) = drift_lines(m.drifts)
    assert "Bcap 2: G 2 measured 1000.0 ms, then 1200.0 ms (+20.0%)" in line
    assert "1 of 1 buckets corrected, largest +20.0% at Bcap 2" in noise_summary(m.stats, NoisePolicy(), "cpu", 0, 0,
                                                                                 m.drifts)
    warning = trust_warning(m.stats, 0.2, NoisePolicy(), drifts=m.drifts)
    assert "drifted between points (Bcap 2 +20%" in warning and "not fitting" not in warning


def test_drift_within_the_tolerance_or_the_windows_spread_is_left_alone(engine, monkeypatch):
    m, _ = _measure(engine, monkeypatch, [1.0] * 3 + [1.5] * 3 + [1.02] * 3, {2: [2, 6]})
    assert not m.drifts[0].corrected and [p.cost_s for p in m.points if p.x == 6] == [1.5] * 3
    assert drift_lines(m.drifts) == []
    # the reference's first window is 10% off, so the set is completed; its windows spread 8%: their 6% move
    # is within what they can tell apart
    m, _ = _measure(engine, monkeypatch, [1.0] * 3 + [1.5] * 3 + [1.1, 1.06, 1.02], {2: [2, 6]})
    assert m.drifts[0].threshold == pytest.approx(0.08 / 1.06) and not m.drifts[0].corrected
    m, clock = _measure(engine, monkeypatch, [1.0] * 3 + [1.5] * 3, {2: [2, 6]}, noise=NoisePolicy(check_drift=False))
    assert m.drifts == [] and clock.used == 6


def test_the_drift_check_is_sequential(engine, monkeypatch):
    """An agreeing first window ends the drift check (1 of 3 windows: the saving at start-up); a
    disagreeing one is followed by the rest of the set, and one noisy window never corrects a bucket."""
    bar = RoundProgress([(2, 2), (2, 6)], 1 + 3 * WINDOW, lambda b, g: g, "test", enabled=False)
    clock = ScriptedClock([1.0] * 3 + [1.5] * 3 + [1.02])
    monkeypatch.setattr(calibrate, "Clock", lambda eng: clock)
    m = measure(engine, {2: [2, 6]}, lambda b, g: rows_plan(b, g, 5), [(16, 1, 200)], 1, WINDOW, 3, 1,
                lambda b, g: 6, progress=bar, width=5)
    assert clock.used == 7 and m.rounds == 2 * (1 + 3 * WINDOW) + 1 + WINDOW
    assert not m.drifts[0].corrected and m.drifts[0].after_s == 1.02
    assert set(bar.remaining.values()) == {0}  # the bar's total drops the windows the check skipped
    # a burst in the first window: the set is completed and its consistent windows say there is no drift
    m, clock = _measure(engine, monkeypatch, [1.0] * 3 + [1.5] * 3 + [1.4, 1.01, 1.0], {2: [2, 6]})
    assert clock.used == 9 and not m.drifts[0].corrected and m.drifts[0].after_s == pytest.approx(1.01)
    assert [p.cost_s for p in m.points if p.x == 6] == [1.5] * 3
    # a real move in every window is still corrected (test_drift_between_points_is_corrected_and_reported)
    m, clock = _measure(engine, monkeypatch, [1.0] * 3 + [1.5] * 3 + [1.1] * 3, {2: [2, 6]})
    assert clock.used == 9 and m.drifts[0].corrected and m.drifts[0].rel == pytest.approx(0.1)


def _stats(spreads, resolved=True):
    return [PointStats(1, i, s, 0, (1.0, 1.0, 1.0), (0, 1, 2), 0.3, resolved) for i, s in enumerate(spreads)]


def test_report_lines():
    pol = NoisePolicy()
    line = noise_summary(_stats([0.01, 0.05]), pol, "cpu", 0, 100)
    assert "0 unresolved" in line and "largest spread 5.0%" in line and "other processes took 30%" in line
    assert trust_warning(_stats([0.01, 0.02]), 0.03, pol) is None
    misfit = trust_warning(_stats([0.01, 0.02]), 0.2, pol)
    assert misfit.startswith("[adaspec] WARNING") and "not fitting" in misfit and "\n" not in misfit
    noisy = trust_warning(_stats([0.3] * 4, resolved=False), 0.2, pol)
    assert "busy" in noisy and "4 of 4 points" in noisy and "\n" not in noisy
    assert "--adaptive_target_verify_cost_table" in noisy  # where a saved table can be loaded, the fix names it
    step = trust_warning(_stats([0.3] * 4, resolved=False), 0.2, pol, table_flag=None)  # the draft step cannot load one
    assert "busy" in step and "--adaptive_target_verify_cost_table" not in step and "cannot load a saved table" in step


def test_eta_prices_remaining_rounds_by_measured_costs():
    def cost(b, rows):  # a bucket's base grows with Bcap, its rows scale it
        return (0.04 + 0.01 * b) * (1 + 0.2 * (rows / b - 1))

    obs = [(b, r, cost(b, r)) for b, rs in ((1, (1, 2, 8)), (4, (4, 8, 32))) for r in rs]
    for rows in (16, 32, 128):
        assert predict_cost(obs, 16, rows) == pytest.approx(cost(16, rows))
    assert predict_cost([], 1, 1) is None
    rows_of = lambda b, g: g  # noqa: E731
    left = {(1, 1): 0, (16, 16): 10, (16, 128): 5}
    assert eta_seconds(left, {(16, 16): 1.0}, obs, rows_of) == pytest.approx(10 * 1.0 + 5 * cost(16, 128))
    bar = RoundProgress([(1, 1), (4, 4)], 10, rows_of, "t", enabled=False)
    assert bar.eta() is None
    bar.advance(1, 1, 10, 0.05)
    bar.add_rounds(1, 1, 6)
    assert bar.remaining == {(1, 1): 6, (4, 4): 10} and bar.eta() > 6 * 0.05


def test_sparse_cpu_geometry_and_why():
    geo, why = choose_prepared(16, 7, "cpu")
    assert geo.request_buckets == (1, 4, 16)
    # at one request every row count up to 4 runs as itself (no lift of 2-3 rows to 4: stop 59)
    assert geo.target_rows == {1: (1, 2, 3, 4, 8), 4: (4, 8, 32), 16: (16, 32, 128)}
    assert "sparse CPU geometry" in why and "11 calibration points instead of 40" in why
    for explicit, device in (((1, 2, 4, 8, 16), "cpu"), (None, "cuda")):
        dense, none = choose_prepared(16, 7, device, explicit)
        assert none is None and dense.request_buckets == (1, 2, 4, 8, 16) and len(dense.target_rows[16]) == 8
    _, why = choose_prepared(16, 3, "cpu", step_mode=True)
    assert "12 calibration points instead of 20" in why


def test_start_up_log_reports_geometry_spread_noise_and_heldout(tiny_llama_dir, tmp_path, capsys):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"contexts": [{"prefill_tokens": 8, "min_kv_length": 1, "max_kv_length": 200}],
                               "warmup_steps": 1, "window_steps": 2, "windows_per_point": 2}))
    llm = LLM(str(tiny_llama_dir), drafter=_draft("dspark", tiny_llama_dir), speculative_algorithm="DSpark",
              num_speculative_tokens=5, max_seqs_per_batch=4, max_num_batched_tokens=64, max_model_len=256,
              enable_adaptive_target_verify=True, adaptive_target_verify_calibration=str(cal))
    err = capsys.readouterr().err
    assert "sparse CPU geometry" in err and '"request_buckets": [1, 4]' in err
    assert "calibration points (cost per round, spread" in err and "Bcap 4: plain " in err and ", G 4 " in err
    assert "calibration noise: clock" in err and "held-out cost error" in err
    assert "one shared prefill per context range" in err
    assert llm.engine.control.table.metadata.request_buckets == [1, 4]
    assert not llm.engine.scheduler.has_unfinished()
    assert torch.get_num_threads() == 1


def test_additive_fit_is_relative_and_robust_to_one_bad_cell():
    from adaspec.calibration.cost_models import AdditiveModel

    def truth(b, g):
        return 0.03 + 0.01 * b + 0.003 * g

    cells = [(b, g) for b in (1, 2, 4, 8) for g in (8, 16, 24, 32)]  # every theta seen by several buckets
    exact = AdditiveModel.fit([(b, g, truth(b, g)) for b, g in cells])
    assert all(exact.cost_ms(b, g) == pytest.approx(1000 * truth(b, g)) for b, g in cells)
    bad = AdditiveModel.fit([(b, g, truth(b, g) * (3.0 if (b, g) == (4, 16) else 1.0)) for b, g in cells])
    others = [abs(bad.cost_ms(b, g) / (1000 * truth(b, g)) - 1) for b, g in cells if (b, g) != (4, 16)]
    assert max(others) < 0.02  # the disturbed cell does not bend the rest of the table


def test_preflight_checks_against_the_sparse_cpu_geometry(tiny_llama_dir, tmp_path):
    """R-F5: a bucket the sparse CPU geometry does not prepare is refused before any work."""
    from adaspec.errors import UserError

    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"request_buckets": [1, 2]}))
    with pytest.raises(UserError, match=r"request_buckets.*\[2\].*prepared request buckets: \[1, 4\]"):
        LLM(str(tiny_llama_dir), drafter=_draft("dspark", tiny_llama_dir), speculative_algorithm="DSpark",
            num_speculative_tokens=5, max_seqs_per_batch=4, max_model_len=256, enable_adaptive_target_verify=True,
            adaptive_target_verify_calibration=str(cal))
