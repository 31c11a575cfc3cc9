"""Leave-one-cell-out accuracy of a fitted cost model (R-F1, issue 13's held-out error).

`heldout_error(points, kind)`: every (bcap, x) cell in turn is removed with all its windows, the
model is refitted on the rest and its prediction compared with the cell's median measured cost.
Cells whose removal disconnects the additive grid, or whose prediction is outside the remaining
coverage, are skipped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .cost_models import MODEL_KINDS, fit_model
from .cost_points import CostModelError, PointLike, as_points, cell_medians, grid_components


@dataclass(frozen=True)
class HeldoutReport:
    """Leave-one-cell-out accuracy of a cost model (median relative error of predicted vs measured cost)."""

    kind: str
    median_rel_error: float | None  # None when no cell could be evaluated
    max_rel_error: float | None
    evaluated: int
    skipped_disconnected: int  # removal disconnected the additive grid
    skipped_uncovered: int  # the cell fell outside the remaining fit's coverage (edge x, lone bcap)
    errors: tuple[tuple[int, int, float], ...] = ()  # (bcap, x, relative error) per evaluated cell

    @property
    def skipped(self) -> int:
        return self.skipped_disconnected + self.skipped_uncovered

    def to_dict(self) -> dict:
        return {"kind": self.kind, "method": "leave-one-cell-out", "median_rel_error": self.median_rel_error,
                "max_rel_error": self.max_rel_error, "evaluated": self.evaluated,
                "skipped_disconnected": self.skipped_disconnected, "skipped_uncovered": self.skipped_uncovered,
                "errors": [list(e) for e in self.errors]}

    def summary(self) -> str:
        med = "n/a" if self.median_rel_error is None else f"{100 * self.median_rel_error:.1f}%"
        return (f"{self.kind}: held-out median relative error {med} over {self.evaluated} cells "
                f"({self.skipped} skipped: {self.skipped_disconnected} would disconnect the grid, "
                f"{self.skipped_uncovered} outside the remaining coverage)")


def heldout_error(points: Iterable[PointLike], kind: str, x_name: str = "G", per_bucket: bool = False) -> HeldoutReport:
    """Leave-one-cell-out: refit without each (bcap, x) cell, predict it, compare with its median cost."""
    pts = as_points(points)
    if kind not in MODEL_KINDS:
        raise CostModelError(f"unknown cost model {kind!r}; allowed: {', '.join(MODEL_KINDS)}")
    measured = cell_medians(pts)
    errors: list[tuple[int, int, float]] = []
    disconnected = uncovered = 0
    for cell, cost in measured.items():
        rest = [p for p in pts if (p.bcap, p.x) != cell]
        if not rest:
            uncovered += 1
            continue
        if kind == "additive" and len(grid_components({(p.bcap, p.x) for p in rest})) > 1:
            disconnected += 1
            continue
        pred = fit_model(rest, kind, x_name, per_bucket).cost_ms(*cell)
        if pred is None:
            uncovered += 1
            continue
        errors.append((cell[0], cell[1], abs(pred / 1000.0 - cost) / cost))
    rel = [e for _, _, e in errors]
    return HeldoutReport(kind, float(np.median(rel)) if rel else None, float(max(rel)) if rel else None,
                         len(errors), disconnected, uncovered, tuple(errors))
