"""The calibration progress bar: counted in rounds, with an ETA from the round costs measured so far.

Points differ in cost by an order of magnitude (a round at Bcap 16 and full width costs ~15x one
at Bcap 1 on one CPU core), so neither points nor tqdm's own rate (rounds done / time) give an
honest ETA while the cheap points run first. `eta_seconds` prices every remaining round instead:
its point's own measured wall time per round once a window of it was timed, otherwise a
prediction from the windows timed so far (`predict_cost`: the bucket's base cost times the growth
with rows per request seen in the largest bucket measured so far). Before the
first window there is no estimate ("ETA ?"). Re-measured points add their rounds to the total.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Sequence

import numpy as np


def predict_cost(observed: Sequence[tuple[int, int, float]], bcap: int, rows: int) -> float | None:
    """Seconds per round at (bcap, rows) from observed (bcap, rows, seconds); None without data.

    A round's cost is its bucket's base (the cheapest measured point of the bucket, or a line
    through the other buckets' bases over Bcap) times a relative growth with rows per request,
    taken from the largest bucket measured at more than one row count. Before there is data for
    either, stated priors fill in (measured on one CPU core, fp32: a bucket's base is 3/4 fixed,
    1/4 proportional to Bcap; one more row per request adds 1/4 of a round)."""
    if not observed:
        return None
    by_b: dict[int, dict[float, float]] = {}
    for b, r, c in observed:
        by_b.setdefault(int(b), {})[r / b] = c
    bases = {b: pts[min(pts)] for b, pts in by_b.items()}
    if bcap in by_b:
        base, q0 = bases[bcap], min(by_b[bcap])
    elif len(bases) >= 2:
        bs = sorted(bases)
        slope, icpt = np.polyfit(np.array(bs, dtype=float), np.array([bases[b] for b in bs]), 1)
        base, q0 = max(float(icpt + slope * bcap), min(bases.values())), 1.0
    else:  # prior: the weights (read once per round whatever Bcap) are most of a round on CPU
        (b0, c0), = bases.items()
        base, q0 = c0 * (0.75 + 0.25 * bcap / b0), 1.0
    q = rows / bcap
    shaped = [b for b, pts in by_b.items() if len(pts) >= 2]
    if not shaped:  # prior: one more row per request adds about a quarter of a round
        return base * (1 + 0.25 * (q - q0))
    ref = by_b[bcap] if bcap in shaped else by_b[max(shaped)]
    qs = sorted(ref)
    rel = np.array([ref[x] / ref[qs[0]] for x in qs])
    grow = float(np.interp(q, qs, rel)) if q <= qs[-1] else float(
        rel[-1] + (rel[-1] - rel[-2]) / (qs[-1] - qs[-2]) * (q - qs[-1]))
    return base * max(grow, 0.1) / float(np.interp(q0, qs, rel))


def eta_seconds(remaining: dict[tuple[int, int], int], own: dict[tuple[int, int], float],
                observed: Sequence[tuple[int, int, float]], rows_of: Callable[[int, int], int]) -> float | None:
    """Seconds left: remaining rounds per point x (the point's own measured cost or the fit)."""
    total = 0.0
    for (bcap, x), n in remaining.items():
        if n <= 0:
            continue
        c = own.get((bcap, x))
        if c is None:
            c = predict_cost(observed, bcap, rows_of(bcap, x))
        if c is None:
            return None
        total += n * c
    return total


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "ETA ?"
    m, s = divmod(int(round(seconds)), 60)
    return f"ETA {m}:{s:02d}"


class RoundProgress:
    """tqdm bar over every planned calibration round (warm-up and timed)."""

    def __init__(self, points: Sequence[tuple[int, int]], rounds_per_point: int, rows_of: Callable[[int, int], int],
                 desc: str, enabled: bool = True):
        self.remaining: dict[tuple[int, int], int] = {}
        for p in points:  # a point measured in several context ranges counts once per range
            self.remaining[p] = self.remaining.get(p, 0) + rounds_per_point
        self.own: dict[tuple[int, int], float] = {}
        self.observed: list[tuple[int, int, float]] = []
        self.rows_of = rows_of
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=sum(self.remaining.values()), desc=desc, unit="round", file=sys.stderr,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} rounds "
                                       "[{elapsed}{postfix}]", postfix="ETA ?")
        self.t0 = time.perf_counter()

    def advance(self, bcap: int, x: int, rounds: int, wall_per_round: float | None) -> None:
        key = (bcap, x)
        self.remaining[key] = self.remaining.get(key, 0) - rounds
        if wall_per_round is not None:
            self.own[key] = wall_per_round
            self.observed.append((bcap, self.rows_of(bcap, x), wall_per_round))
        if self.bar is not None:
            self.bar.update(rounds)
            self.bar.set_postfix_str(_fmt(self.eta()), refresh=False)

    def add_rounds(self, bcap: int, x: int, rounds: int) -> None:
        """A re-measured point: its extra rounds join the total."""
        self.remaining[(bcap, x)] = self.remaining.get((bcap, x), 0) + rounds
        if self.bar is not None:
            self.bar.total += rounds
            self.bar.refresh()

    def eta(self) -> float | None:
        return eta_seconds(self.remaining, self.own, self.observed, self.rows_of)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
