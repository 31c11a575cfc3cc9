"""Start-up of adaptive control: load a saved cost table (R-G2) or calibrate one with real rounds on synthetic requests
(R-F2, R-F7), logging the effective configuration, each point's spread, the noise and the held-out error (one warning
line when the table is too noisy to trust), and optionally save it (R-G1). Split from engine/control.py, whose
AdaptiveControl calls `load_or_calibrate` once, before the engine reports ready.
"""

from __future__ import annotations

import statistics
import time

from ..calibration.cost_table import TABLE_FLAG, CostTable
from ..calibration.host import host_identity, host_note
from ..calibration.robust import NoisePolicy, drift_lines, heldout_line, noise_summary, spread_lines, trust_warning
from ..rounds import RoundPlan
from .calibrate import measure, rows_plan, steps_plan
from .calibration_progress import RoundProgress


def _plain_costs(points) -> dict[int, float]:
    """Per request bucket, the median cost in ms of its plain-round windows (x = 0)."""
    by_b: dict[int, list[float]] = {}
    for p in points:
        if p.x == 0:
            by_b.setdefault(p.bcap, []).append(1000.0 * p.cost_s)
    return {b: float(statistics.median(v)) for b, v in sorted(by_b.items())}


def load_or_calibrate(control, cfg, progress: bool) -> CostTable:
    """`control`'s cost table: the saved one (`--adaptive_target_verify_cost_table`) or one calibrated now with
    `control.effective`; sets `control.synthetic_requests` and `control.measurement` when it calibrates."""
    if cfg.adaptive_target_verify_cost_table:
        table = CostTable.load(cfg.adaptive_target_verify_cost_table, control.compat)
        block = table.log_block(control.facts, source=f"saved table {cfg.adaptive_target_verify_cost_table}")
        control.log(block + (f"\n{control.geometry_note}" if control.geometry_note else ""))
        note = host_note(table.metadata.host, host_identity(control.engine.device), TABLE_FLAG)
        if note:
            control.log(note)
        return table
    eff = control.effective
    noise = NoisePolicy()
    # the plain round (no draft, one row per request) the floor compares with every budget: on CPU
    # timed inside the G = Bcap rounds (those rounds less their draft call), elsewhere a point of its own
    split = control.mode != "adaptive_draft_step" and control.engine.device.type == "cpu"
    plain_note = ("" if control.mode == "adaptive_draft_step" else
                  "\n[adaspec] also measured: the plain round (no draft) of every request bucket, for the plain "
                  + ("floor, timed inside its G = Bcap rounds (their time less the draft call's; CPU execution "
                     "is synchronous)" if split else "floor, as one more point per bucket"))
    control.log(eff.log_block(control.algorithm, control.config_source)
                + (f"\n{control.geometry_note}" if control.geometry_note else "") + plain_note
                + f"\n{noise.describe()}")
    if control.mode == "adaptive_draft_step":
        make_plan, growth = steps_plan, (lambda b, k: k + 1)
        rows_of = lambda b, k: b * (k + 1)  # noqa: E731
    else:
        # G = 0 stands for a plain round (no draft, one row per request), measured once per request
        # bucket beside the grid: the plain floor compares speculating with not drafting at all
        make_plan = lambda b, rows: RoundPlan.plain(b) if rows == 0 else rows_plan(b, rows, control.width)  # noqa: E731
        growth = lambda b, rows: control.width + 1 if rows else 1  # noqa: E731 - worst case: every row accepted
        rows_of = lambda b, rows: rows or b  # noqa: E731
    separate_plain = control.mode != "adaptive_draft_step" and not split
    grid = {b: ([0] if separate_plain else []) + list(eff.grid[b]) for b in eff.request_buckets}
    points = [(b, x) for _ in eff.contexts for b in eff.request_buckets for x in grid[b]]
    bar = RoundProgress(points, eff.rounds_per_point, rows_of, f"{control.algorithm} calibration", enabled=progress)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        m = measure(control.engine, grid, make_plan,
                    eff.context_tuples(), eff.warmup_steps, eff.window_steps, eff.windows_per_point,
                    eff.token_seed, growth, progress=bar, requests_per_bucket=eff.shard_requests,
                    noise=noise, width=control.width,
                    plain_within={b: b for b in eff.request_buckets} if split else None)
    finally:
        bar.close()
    control.synthetic_requests = dict(m.synthetic_requests)  # per request bucket, on this shard (R-H1)
    plain = _plain_costs(m.points) if control.mode != "adaptive_draft_step" else None
    table = CostTable.build([p for p in m.points if p.x or control.mode == "adaptive_draft_step"], eff, control.compat,
                            plain_ms=plain, host=host_identity(control.engine.device))
    how = ("one shared prefill per context range, forked into every request slot, rewound by length after "
           "every point" if m.shared_prefill else "every synthetic request prefilled separately (the "
           "drafter has no copy_slot)")
    control.log(f"[adaspec] calibration: {len(m.stats)} points, {m.rounds} rounds in "
                f"{time.perf_counter() - t0:.1f} s ({time.process_time() - c0:.1f} s of process CPU time; {how})")
    control.log("[adaspec] calibration points (cost per round, spread of the consistent windows"
                + ("; plain = a round without draft" if plain else "") + "):\n"
                + "\n".join(spread_lines(m.stats, eff.x_name)))
    control.log(noise_summary(m.stats, noise, m.clock, m.extra_rounds, m.extra_allowed, m.drifts))
    for line in drift_lines(m.drifts, eff.x_name):
        control.log(line)
    heldout = table.metadata.heldout or {}
    if heldout:
        control.log(f"[adaspec] held-out cost error: {heldout_line(heldout)}")
    warning = trust_warning(m.stats, heldout.get("median_rel_error"), noise, eff.model, m.drifts,
                            None if control.mode == "adaptive_draft_step" else TABLE_FLAG)
    if warning:
        control.log(warning)
    control.measurement = m
    out = cfg.adaptive_target_verify_cost_table_output
    if out:
        table.save(out)
        control.log(f"[adaspec] cost table written to {out}")
    return table
