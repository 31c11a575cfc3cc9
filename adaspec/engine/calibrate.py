"""Start-up warm-up and cost calibration by driving the engine's real rounds (R-F2, R-C3).

Synthetic greedy requests (tokens drawn from `token_seed`) are admitted through the normal
scheduler, prefilled by normal rounds, and then decoded with a *forced* plan: for adaptive verify
every request bucket Bcap x target-row bucket G, for adaptive draft step every Bcap x step count
k. After `warmup_steps` rounds, `windows_per_point` windows of `window_steps` rounds are timed
(the only timing code in adaspec; serving has none). A window's cost is the whole round: draft,
verify, sampling, acceptance, refresh, result transfer -- nothing is added on top later.

What makes the built-in defaults fast (issue 13) without changing what they mean:
- the synthetic requests of a context range share one prompt (`SharedPrefixLoad`): it is
  prefilled once, the draft reads it once, and the other requests are forks of that state
  (engine/fork.py copies target KV, draft caches and pending refresh entries into free slots);
- every point starts from that cached state: after a point each request is rewound by length,
  never re-prefilled, so every point is measured at the same KV lengths and no point runs out of
  its KV range;
- shapes the calibration measures are warmed by its own warm-up rounds; the separate warm-up only
  runs prepared shapes the calibration grid leaves out (engine/control.py).
- on a CPU device (synchronous execution) the plain round of each request bucket, which the plain
  floor compares with speculating (adaptive/floor.py), is not a point of its own: the G = Bcap
  rounds verify one row per request, which is a plain round's whole work plus the draft call, so
  the same windows also give the plain cost as their time less the time spent inside the drafter
  (`plain_within`; RoundRunner.draft_clock times only that call). What remains in it beyond a
  plain round is the acceptance count of 0-row drafts, a few tensor ops. One point fewer per
  bucket: 104 rounds x the plain cost (34 s of the 237 s start-up of DSpark w = 7).
Drafters without positional state (no `copy_slot`) fall back to `SyntheticLoad`: one prompt per
request, re-prefilled whenever a point would leave the KV range (same semantics, slower).

Noise (`calibration.robust`): windows are timed with the process CPU clock on a one-thread CPU
engine (wall time elsewhere) and their wall time is kept too, so the share of time other processes
took is known; a point whose windows disagree beyond the stated tolerance is measured again,
within a bounded budget, and the cell cost is the median of its most consistent windows. Drift
between points, which no point's own windows show, is checked per request bucket: its first point
is measured again after its last, and a move beyond the threshold is corrected linearly in time
(engine/calibration_drift.py, robust.drift_factors). (Measuring a bucket's points window by window in
turn instead was tried at stop 49: over six alternating start-ups each, MTP k = 1's cost over plain spread
1.09-1.48x in turn against 1.04-1.28x one after another, with more points left unresolved, since a slow
stretch then spreads every point's windows; BENCHMARKS.md.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from ..calibration.robust import Drift, NoisePolicy, PointStats, consistent_windows
from ..rounds import RoundPlan
from .calibration_drift import correct_drift
from .calibration_loads import SharedPrefixLoad, SyntheticLoad
from .fork import can_fork


@dataclass(frozen=True)
class Point:
    bcap: int
    x: int  # target rows G (adaptive verify) or draft steps k (adaptive draft step)
    cost_s: float  # seconds per round, one window's mean
    kv_len: int  # mean context length of the requests during the window


def rows_plan(bcap: int, rows: int, width: int) -> RoundPlan:
    """Full-width drafting, `rows - bcap` verify rows spread as evenly as possible (R-D1)."""
    extra = rows - bcap
    lens = tuple(min(width, extra // bcap + (1 if i < extra % bcap else 0)) for i in range(bcap))
    return RoundPlan(width, lens, exact=True)  # every planned row, proposals or not (Suffix: issue 10)


def steps_plan(bcap: int, k: int) -> RoundPlan:
    return RoundPlan(k, (k,) * bcap, exact=True)


def warm_up(engine, shapes: Iterable[tuple[int, RoundPlan]], prompt_len: int = 16) -> int:
    """Run every given prepared shape once (R-E4). Returns the number of shapes run."""
    g = torch.Generator().manual_seed(0)
    by_bcap: dict[int, list[RoundPlan]] = {}
    for bcap, plan in shapes:
        by_bcap.setdefault(bcap, []).append(plan)
    n = 0
    for bcap, plans in by_bcap.items():
        load = SyntheticLoad(engine, bcap, prompt_len, g)
        for plan in plans:
            load.round(plan)
            n += 1
        load.close()
    return n


class Clock:
    """Seconds of one window. On a one-thread CPU engine the process CPU clock (the work itself:
    equal to wall time on a quiet core, and blind to time slices other processes take); otherwise
    wall time, synchronised with the device. Both are always read, for the steal share."""

    def __init__(self, engine):
        self.device = engine.device
        self.cpu = engine.device.type == "cpu" and torch.get_num_threads() == 1
        self.name = "process CPU time (one-thread CPU engine)" if self.cpu else "wall time"

    def now(self) -> tuple[float, float]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter(), time.process_time()

    def read(self) -> float:
        """This clock's seconds (no device synchronisation: for synchronous execution only)."""
        return time.process_time() if self.cpu else time.perf_counter()

    def cost(self, t0: tuple[float, float], t1: tuple[float, float]) -> tuple[float, float]:
        """(cost seconds by this clock, wall seconds)."""
        wall = t1[0] - t0[0]
        return (t1[1] - t0[1] if self.cpu else wall), wall


@dataclass
class Measurement:
    points: list[Point]
    stats: list[PointStats]
    clock: str
    shared_prefill: bool
    seconds: float = 0.0
    rounds: int = 0
    extra_rounds: int = 0  # rounds spent measuring noisy points again
    extra_allowed: int = 0
    synthetic_requests: dict = field(default_factory=dict)  # bcap -> synthetic requests this engine built
    drifts: list[Drift] = field(default_factory=list)  # per checked bucket: its reference point before and after


@dataclass
class _Run:
    """One grid point being measured: its plan, whether its windows also time a plain round, what they measured."""

    bcap: int
    x: int
    plan: RoundPlan
    split: bool  # plain_within: the windows less their draft calls are a plain round's cost too
    windows: list = field(default_factory=list)  # (cost s/round, wall s/round, mean KV length)
    plain: list = field(default_factory=list)  # split: the same windows less their draft calls, s/round
    sets: int = 0  # sets of windows_per_point windows measured


class _Timing:
    """`measure`'s rounds, windows and per-point settling on a load, counted into the Measurement `out`; `budget`:
    the re-measurement rounds left for the whole table."""

    def __init__(self, engine, clock, out, progress, noise, window_steps: int, windows_per_point: int):
        self.engine, self.clock, self.out, self.progress, self.noise = engine, clock, out, progress, noise
        self.window_steps, self.windows_per_point = window_steps, windows_per_point
        self.budget = out.extra_allowed

    def rounds(self, load, run: _Run, n: int) -> None:
        """n untimed rounds (warm-up)."""
        for _ in range(n):
            load.round(run.plan)
        self.out.rounds += n
        if self.progress is not None:
            self.progress.advance(run.bcap, run.x, n, None)

    def window(self, load, run: _Run) -> None:
        """One timed window of `window_steps` rounds."""
        runner, steps = self.engine.rounds, self.window_steps
        runner.draft_clock = self.clock.read if run.split else None
        runner.draft_seconds = 0.0
        kv0, t0 = load.kv_len, self.clock.now()
        for _ in range(steps):
            load.round(run.plan)
        cost, wall = self.clock.cost(t0, self.clock.now())
        runner.draft_clock = None
        run.windows.append((cost / steps, wall / steps, (kv0 + load.kv_len) // 2))
        if run.split:
            run.plain.append((cost - runner.draft_seconds) / steps)
        self.out.rounds += steps
        if self.progress is not None:
            self.progress.advance(run.bcap, run.x, steps, wall / steps)
        if len(run.windows) % self.windows_per_point == 0:
            run.sets += 1  # a whole set measured

    def settle(self, load, run: _Run, need: int, max_kv: int) -> None:
        """Measure the point again (from the cached state, a whole set at a time) while its consistent windows spread
        beyond the tolerance, within max_remeasures and the table's budget; then record it in `out`."""
        noise, out, n = self.noise, self.out, self.windows_per_point
        while True:
            chosen, spread = consistent_windows([w[0] for w in run.windows], n)
            if run.split:
                chosen_p, spread_p = consistent_windows(run.plain, n)
                spread = max(spread, spread_p)  # both costs must be consistent
            again = self.window_steps * n
            if spread <= noise.tolerance or run.sets > noise.max_remeasures or again > self.budget:
                break
            if not load.can_rewind and load.kv_len + need > max_kv:
                break  # no room left in this KV range for another set of windows
            self.budget -= again
            out.extra_rounds += again
            if self.progress is not None:
                self.progress.add_rounds(run.bcap, run.x, again)
            if load.can_rewind:
                load.rewind()
            for _ in range(n):
                self.window(load, run)
        cpu = sum(w[0] for w in run.windows)
        wall = sum(w[1] for w in run.windows)
        steal = max(0.0, 1.0 - cpu / wall) if self.clock.cpu and wall > 0 else None
        bcap, x, windows = run.bcap, run.x, run.windows
        if run.split:
            out.stats.append(PointStats(bcap, 0, spread_p, run.sets - 1, tuple(run.plain), tuple(chosen_p),
                                        steal=steal, resolved=spread <= noise.tolerance))
            out.points += [Point(bcap, 0, run.plain[i], windows[i][2]) for i in chosen_p]
        out.stats.append(PointStats(bcap, x, spread, run.sets - 1, tuple(w[0] for w in windows), tuple(chosen),
                                    steal=steal, resolved=spread <= noise.tolerance))
        out.points += [Point(bcap, x, windows[i][0], windows[i][2]) for i in chosen]


def measure(
    engine,
    grid: dict[int, list[int]],  # Bcap -> x values
    make_plan: Callable[[int, int], RoundPlan],
    contexts: list[tuple[int, int, int]],  # (prefill_tokens, min_kv, max_kv)
    warmup_steps: int,
    window_steps: int,
    windows_per_point: int,
    token_seed: int,
    rows_per_round: Callable[[int, int], int],  # worst-case KV growth of one round at (Bcap, x)
    progress=None,
    requests_per_bucket: Callable[[int], int] = lambda bcap: bcap,  # per DP shard (R-H1)
    noise: NoisePolicy | None = None,
    width: int = 0,
    plain_within: dict[int, int] | None = None,  # Bcap -> the x whose rounds also time a plain round
) -> Measurement:
    """Time every grid point in every context range (see the module doc).

    `plain_within` (synchronous devices only, i.e. CPU): for request bucket Bcap, the rounds of
    point x = plain_within[Bcap] also give the cost of a *plain* round (no draft), recorded as point
    x = 0: each window's time less the time its rounds spent in the drafter's call. Adaptive verify
    uses G = Bcap, whose rounds verify one row per request, exactly a plain round's target work
    (see the module doc).

    Returns a `Measurement`: `points` (the consistent windows of every point, what the table is
    fitted on), `stats` (every point's windows, spread, re-measures and steal share: the log's
    report), the clock used and the re-measurement rounds spent and allowed."""
    plain_within = plain_within or {}
    if plain_within and engine.device.type != "cpu":
        raise ValueError("plain_within needs synchronous execution (a CPU device): on an asynchronous "
                         "device the draft call's time is not the draft's cost")
    noise = noise or NoisePolicy()
    g = torch.Generator().manual_seed(token_seed)
    clock = Clock(engine)
    shared = can_fork(engine)
    out = Measurement([], [], clock.name, shared)
    planned = len(contexts) * sum(len(xs) for xs in grid.values()) * (warmup_steps + window_steps * windows_per_point)
    # re-measurement rounds left for the whole table (bounded)
    out.extra_allowed = noise.extra_rounds(planned, window_steps * windows_per_point)
    timing = _Timing(engine, clock, out, progress, noise, window_steps, windows_per_point)
    t_start = time.perf_counter()
    for prefill, min_kv, max_kv in contexts:
        load = SharedPrefixLoad(engine, prefill, g, width) if shared else None
        for bcap, xs in sorted(grid.items()):
            n_req = out.synthetic_requests[bcap] = requests_per_bucket(bcap)
            if shared:
                load.resize(n_req)
            else:
                load = SyntheticLoad(engine, n_req, prefill, g, width)
            check = shared and noise.check_drift and len(xs) >= 2
            if check and progress is not None:  # the reference's second measurement (below)
                progress.add_rounds(bcap, xs[0], 1 + window_steps * windows_per_point)
            marks = []  # per point: (time mid-measurement, first index in out.points, in out.stats)
            for x in xs:
                marks.append([time.perf_counter(), len(out.points), len(out.stats)])
                run = _Run(bcap, x, make_plan(bcap, x), plain_within.get(bcap) == x)
                need = (warmup_steps + window_steps * windows_per_point) * rows_per_round(bcap, x)
                if shared:
                    load.rewind()
                elif load.kv_len + need > max_kv or load.kv_len < min_kv:
                    load.close()
                    load = SyntheticLoad(engine, n_req, prefill, g, width)
                timing.rounds(load, run, warmup_steps)
                for _ in range(windows_per_point):
                    timing.window(load, run)
                timing.settle(load, run, need, max_kv)
                marks[-1][0] = (marks[-1][0] + time.perf_counter()) / 2
            if check:
                out.rounds += correct_drift(out, load, make_plan(bcap, xs[0]), bcap, xs[0], marks, clock, noise,
                                             window_steps, windows_per_point, progress)
            if not shared:
                load.close()
        if shared:
            load.close()
    out.seconds = time.perf_counter() - t_start
    return out
