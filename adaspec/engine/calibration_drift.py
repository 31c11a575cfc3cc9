"""Drift between calibration points (issue 13): a request bucket's first point measured again after its last.

`calibrate.measure` calls `correct_drift` once per request bucket of a context range when the load can
rewind to its cached state (SharedPrefixLoad) and the bucket has at least two points. When the
reference's cost moved beyond `max(NoisePolicy.drift_tolerance, both measurements' own spreads)`,
every point of the bucket, windows and fitted points alike, is divided by the drift at the time it
was measured (`robust.drift_factors`), and the log prints one line per corrected bucket
(`robust.drift_lines`).

The check is sequential: one warm-up round and one window first; when that window already agrees
with the reference within `max(drift_tolerance, the reference's spread)` there is no drift to
correct and the check stops there. Only a window that disagrees is followed by the rest of a set
of windows, and the decision then takes their consistent median as before, so one noisy window
never corrects a bucket alone. Why: the full set cost 12% of the default 16-slot DSpark start-up
(97 rounds at Bcap 16's G = 16, 135-155 ms each on a Zen 4 core, where that start-up measured
172-191 s against issue 13's 180 s); when the first window agrees two thirds of it are saved
(BENCHMARKS.md, "Stop 48": ~100 rounds per start-up).
"""

from __future__ import annotations

import dataclasses
import time
from statistics import median

from ..calibration.robust import Drift, consistent_windows, drift_factors
from ..rounds import RoundPlan


def correct_drift(out, load, plan: RoundPlan, bcap: int, x0: int, marks: list, clock, noise,
                   window_steps: int, windows_per_point: int, progress) -> int:
    """Measure the bucket's first point x0 again (from the cached state; one window, or a set when
    that one disagrees: module docstring) and, when its cost moved beyond the threshold, divide every
    point of the bucket by the machine's drift at the time it was measured (robust.drift_factors).
    `out` is the calibrate.Measurement being built, `marks` its [time mid-measurement, first index in
    out.points, in out.stats] per point of the bucket. Returns the rounds run."""
    first = next(s for s in out.stats[marks[0][2]:] if s.x == x0)
    load.rewind()
    load.round(plan)  # one warm-up round: the last point ran another plan
    if progress is not None:
        progress.advance(bcap, x0, 1, None)
    t_start, costs = time.perf_counter(), []
    agree = max(noise.drift_tolerance, first.spread)
    for _ in range(windows_per_point):
        t0 = clock.now()
        for _ in range(window_steps):
            load.round(plan)
        cost, wall = clock.cost(t0, clock.now())
        costs.append(cost / window_steps)
        if progress is not None:
            progress.advance(bcap, x0, window_steps, wall / window_steps)
        if len(costs) == 1 and abs(costs[0] / first.cost_s - 1.0) <= agree:
            break  # the first window agrees: no drift (module docstring)
    skipped = window_steps * (windows_per_point - len(costs))
    if skipped and progress is not None:
        progress.add_rounds(bcap, x0, -skipped)  # the bar planned a whole set
    chosen, spread = consistent_windows(costs, windows_per_point)
    after = median(costs[i] for i in chosen)
    t_after = (t_start + time.perf_counter()) / 2
    drift = Drift(bcap, x0, first.cost_s, after, t_after - marks[0][0],
                  max(noise.drift_tolerance, first.spread, spread))
    out.drifts.append(drift)
    if drift.corrected:
        ends = [m[1:] for m in marks[1:]] + [[len(out.points), len(out.stats)]]
        factors = drift_factors([m[0] for m in marks], marks[0][0], t_after, drift.rel)
        for (t, p0, s0), (p1, s1), f in zip(marks, ends, factors):
            out.points[p0:p1] = [dataclasses.replace(p, cost_s=p.cost_s / f) for p in out.points[p0:p1]]
            out.stats[s0:s1] = [dataclasses.replace(s, windows=tuple(w / f for w in s.windows))
                                for s in out.stats[s0:s1]]
    return 1 + window_steps * len(costs)
