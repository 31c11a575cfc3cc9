"""Calibration on a busy machine: consistent windows, bounded re-measurement, the noise report (issue 13).

Timing noise on a shared machine is one-sided (other work only adds time) and comes in bursts
that can cover a whole window. Per point:

- `consistent_windows(costs, n)`: the n windows whose costs agree best (the tightest run of n
  sorted values); their relative range (max - min) / median is the point's *spread*, and the
  cell's cost is based on these windows only (a burst that hit fewer windows is ignored);
- a point whose spread exceeds `NoisePolicy.tolerance` is measured again (another set of
  `windows_per_point` windows from the same cached state), at most `max_remeasures` times per
  point and within `extra_fraction` of the planned calibration rounds for the whole table (at
  least one set);
- what could not be resolved is reported, and `noise_report` adds one warning line when the
  table is too noisy to trust (held-out error or unresolved points above the stated limits).

The fit itself is robust as well (cost_models: per-cell medians, Huber-weighted least squares).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import median
from typing import Sequence


@dataclass(frozen=True)
class NoisePolicy:
    tolerance: float = 0.10  # largest accepted spread of a point's consistent windows
    max_remeasures: int = 2  # extra sets of windows one point may get
    extra_fraction: float = 0.25  # re-measurement rounds allowed, as a share of the planned rounds
    trust_heldout: float = 0.10  # held-out median error above this: the table is too noisy to trust
    trust_unresolved: float = 0.10  # share of points left above tolerance beyond which it is, too
    drift_tolerance: float = 0.03  # a request bucket's reference point that moved more than this is corrected
    check_drift: bool = True  # re-measure each bucket's first point after its last (drift_factors)

    def extra_rounds(self, planned_rounds: int, one_set: int) -> int:
        """Re-measurement rounds allowed for a table: the stated share of the planned rounds, and at
        least one set of windows when any share is allowed (small grids)."""
        share = int(self.extra_fraction * planned_rounds)
        return max(share, one_set) if self.extra_fraction > 0 else 0

    def describe(self) -> str:
        return (f"noise policy: a point whose consistent windows spread more than {100 * self.tolerance:.0f}% "
                f"(relative range) is measured again, at most {self.max_remeasures} times, within "
                f"{100 * self.extra_fraction:.0f}% extra rounds; the table is not trusted above "
                f"{100 * self.trust_heldout:.0f}% held-out median error")


@dataclass(frozen=True)
class PointStats:
    bcap: int
    x: int
    spread: float  # relative range of the consistent windows
    remeasures: int  # extra sets of windows this point got
    windows: tuple[float, ...]  # every window's cost (s per round), in measuring order
    chosen: tuple[int, ...]  # indices of the consistent windows the cell's cost is based on
    steal: float | None = None  # share of wall time other processes took (one-thread CPU clock only)
    resolved: bool = True  # spread <= tolerance in the end

    @property
    def cost_s(self) -> float:
        return median(self.windows[i] for i in self.chosen)


@dataclass(frozen=True)
class Drift:
    """A request bucket's first point measured again after the bucket's last point (see drift_factors)."""

    bcap: int
    x: int  # the reference point: the bucket's first
    before_s: float  # its cost per round when first measured
    after_s: float  # and when measured again
    seconds: float  # time between the two measurements
    threshold: float  # the relative change that counts as drift (tolerance, or the windows' own spread)

    @property
    def rel(self) -> float:
        return self.after_s / self.before_s - 1.0

    @property
    def corrected(self) -> bool:
        return abs(self.rel) > self.threshold


def drift_factors(times: Sequence[float], t0: float, t1: float, rel: float) -> list[float]:
    """The machine's cost factor at each time in `times`, relative to t0: 1 at t0, 1 + rel at t1,
    linear in between and constant outside [t0, t1]. A point measured at time t is divided by its
    factor, which puts the whole bucket at the speed the machine had when it started the bucket.

    Why: the consistent-windows rule only sees noise *within* a point. A machine whose speed drifts
    between points (another job starting, a neighbour on the host) shifts whole points against each
    other, which no per-point spread shows: on one idle start-up G = 8 measured cheaper than G = 4
    with every point's windows within 1% (BENCHMARKS.md, issue 13), and the additive fit's held-out
    error reached 19.8%."""
    if t1 <= t0:
        return [1.0 for _ in times]
    return [1.0 + rel * min(1.0, max(0.0, (t - t0) / (t1 - t0))) for t in times]


def drift_lines(drifts: Sequence[Drift], x_name: str = "G") -> list[str]:
    """The log's lines for buckets whose reference point moved beyond its threshold."""
    lines = []
    for d in drifts:
        if d.corrected:
            name = "plain" if x_name == "G" and d.x == 0 else f"{x_name} {d.x}"
            lines.append(f"[adaspec] calibration drift: Bcap {d.bcap}: {name} measured {1000 * d.before_s:.1f} ms, "
                         f"then {1000 * d.after_s:.1f} ms ({100 * d.rel:+.1f}%) after the bucket's other points "
                         f"({d.seconds:.0f} s later); the bucket's costs were corrected linearly in time to its start")
    return lines


def spread_of(costs: Sequence[float]) -> float:
    m = median(costs)
    return (max(costs) - min(costs)) / m if m > 0 else 0.0


def consistent_windows(costs: Sequence[float], n: int) -> tuple[list[int], float]:
    """Indices of the n windows that agree best (tightest run of n sorted costs) and their spread."""
    if not costs:
        raise ValueError("no windows measured")
    n = max(1, min(n, len(costs)))
    order = sorted(range(len(costs)), key=lambda i: costs[i])
    best, best_spread = order[:n], float("inf")
    for s in range(len(order) - n + 1):
        run = order[s:s + n]
        sp = spread_of([costs[i] for i in run])
        if sp < best_spread - 1e-12:
            best, best_spread = run, sp
    return sorted(best), best_spread


def spread_lines(stats: Sequence[PointStats], x_name: str = "G") -> list[str]:
    """One line per request bucket: each point's cost and spread (and re-measures)."""
    by_b: dict[int, list[PointStats]] = defaultdict(list)
    for s in stats:
        by_b[s.bcap].append(s)
    lines = []
    for b in sorted(by_b):
        parts = []
        for s in by_b[b]:
            cost = 1000 * s.cost_s
            flag = "" if s.resolved else " UNRESOLVED"
            again = f" x{s.remeasures + 1}" if s.remeasures else ""
            name = "plain" if x_name == "G" and s.x == 0 else f"{x_name} {s.x}"  # G 0: plain round, no draft
            parts.append(f"{name} {cost:.1f} ms ±{100 * s.spread:.1f}%{again}{flag}")
        lines.append(f"  Bcap {b}: " + ", ".join(parts))
    return lines


def noise_summary(stats: Sequence[PointStats], policy: NoisePolicy, clock: str, extra_used: int,
                  extra_allowed: int, drifts: Sequence[Drift] = ()) -> str:
    again = [s for s in stats if s.remeasures]
    unresolved = [s for s in stats if not s.resolved]
    steals = [s.steal for s in stats if s.steal is not None]
    worst = max((s.spread for s in stats), default=0.0)
    text = (f"[adaspec] calibration noise: clock {clock}; tolerance {100 * policy.tolerance:.0f}% spread of the "
            f"consistent windows; {len(again)} of {len(stats)} points measured again ({extra_used} of "
            f"{extra_allowed} extra rounds allowed); {len(unresolved)} unresolved; largest spread {100 * worst:.1f}%")
    if steals:
        text += f"; other processes took {100 * median(steals):.0f}% of the wall time (median over points)"
    if drifts:
        worst_drift = max(drifts, key=lambda d: abs(d.rel))
        text += (f"; drift (each bucket's first point again after its last): {sum(d.corrected for d in drifts)} of "
                 f"{len(drifts)} buckets corrected, largest {100 * worst_drift.rel:+.1f}% at Bcap {worst_drift.bcap}")
    return text


def trust_warning(stats: Sequence[PointStats], heldout_median: float | None, policy: NoisePolicy,
                  model: str = "additive", drifts: Sequence[Drift] = (),
                  table_flag: str | None = "--adaptive_target_verify_cost_table") -> str | None:
    """One warning line when the table is too noisy to trust, else None. It says why: timing noise
    (points left unresolved) or a model that does not fit consistent measurements. `table_flag`: the flag that
    loads a saved table (None: the mode cannot load one, the adaptive draft step, R-C3)."""
    elsewhere = (f" or load a table saved there with {table_flag}" if table_flag else
                 " (the adaptive draft step calibrates at every start-up: it cannot load a saved table)")
    unresolved = sum(not s.resolved for s in stats)
    noisy = bool(stats) and unresolved / len(stats) > policy.trust_unresolved
    bad_fit = heldout_median is not None and heldout_median > policy.trust_heldout
    if not (noisy or bad_fit):
        return None
    reasons = []
    if bad_fit:
        reasons.append(f"held-out median error {100 * heldout_median:.1f}% > {100 * policy.trust_heldout:.0f}%")
    if noisy:
        reasons.append(f"{unresolved} of {len(stats)} points still spread more than {100 * policy.tolerance:.0f}% "
                       "after re-measuring")
        why = ("the machine was busy while calibrating; recalibrate on a quieter machine (pin the engine to a "
               "free core with taskset)" + elsewhere)
    elif any(d.corrected for d in drifts):
        moved = ", ".join(f"Bcap {d.bcap} {100 * d.rel:+.0f}%" for d in drifts if d.corrected)
        why = (f"every point's windows agree, but the machine's speed drifted between points ({moved}; corrected "
               "linearly in time, which a step change defeats); recalibrate on a quieter machine" + elsewhere)
    else:
        why = (f"every point's windows agree, so this is the {model} model not fitting these costs rather than "
               "noise; the controllers still use it: calibrate a denser grid (--graph_decode_batch_sizes) "
               f"or try another model (\"model\" in the calibration file)")
    return "[adaspec] WARNING: the cost table is not to be trusted (" + "; ".join(reasons) + "): " + why


def heldout_line(heldout: dict) -> str:
    """One line from HeldoutReport.to_dict()."""
    med, mx = heldout.get("median_rel_error"), heldout.get("max_rel_error")
    if med is None:
        return f"{heldout.get('kind')}: no cell could be evaluated ({heldout.get('skipped_disconnected', 0)} + " \
               f"{heldout.get('skipped_uncovered', 0)} skipped)"
    return (f"{heldout.get('kind')} model, leave-one-cell-out: median {100 * med:.1f}%, max {100 * mx:.1f}% over "
            f"{heldout.get('evaluated')} cells ({heldout.get('skipped_disconnected', 0)} would disconnect the grid, "
            f"{heldout.get('skipped_uncovered', 0)} outside the remaining coverage)")
