"""PNG of measured whole-round costs vs the fitted model, one panel per request bucket (issue 4, item 6).

matplotlib is optional (`pip install 'adaspec[plot]'`) and imported lazily; the figure is drawn on
an Agg canvas without touching pyplot's global state.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..errors import UserError
from .cost_table import CostTable


class PlotUnavailableError(UserError, RuntimeError):
    """matplotlib is not installed (or the plot cannot be written where asked)."""


DEFAULT_PLOT = "calibration.png"


def plot_target(requested: str | None) -> str | None:
    """Where `adaspec calibrate` will plot, decided before calibrating (issue 9, fix 4).

    None (flag not given): DEFAULT_PLOT if matplotlib is installed, else no plot and a note on
    stderr. "" : no plot. A path: matplotlib must be installed and its directory must exist, or
    PlotUnavailableError names --plot now, before any model work."""
    import importlib.util
    import sys

    have = importlib.util.find_spec("matplotlib") is not None
    if requested is None:
        if not have:
            print("[adaspec] calibrate: matplotlib is not installed, so no plot is drawn "
                  "(pip install 'adaspec[plot]' for calibration.png)", file=sys.stderr)
            return None
        requested = DEFAULT_PLOT
    if not requested:
        return None
    if not have:
        raise PlotUnavailableError(f"--plot={requested}: plotting needs matplotlib, which is not installed; "
                                   "pip install 'adaspec[plot]', or pass --plot= for no plot", param="--plot")
    parent = Path(requested).expanduser().resolve().parent
    if not parent.is_dir():
        raise PlotUnavailableError(f"--plot={requested}: directory {str(parent)!r} does not exist; create it or "
                                   "choose another path", param="--plot")
    return requested


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise PlotUnavailableError(
            "plotting the cost fit needs matplotlib, which is not installed; "
            "install it with: pip install 'adaspec[plot]' (or pip install matplotlib)"
        ) from e
    return Figure, FigureCanvasAgg


def plot_fit(table: CostTable, path: str | os.PathLike) -> Path:
    """Measured points (dots) and the fitted model (line) in ms per round vs G (or k), per Bcap."""
    Figure, FigureCanvasAgg = _matplotlib()
    meta, model = table.metadata, table.model
    by_bcap: dict[int, list] = {}
    for p in table.points:
        by_bcap.setdefault(p.bcap, []).append(p)
    bcaps = sorted(set(by_bcap) | set(meta.request_buckets))
    if not bcaps:
        raise ValueError("the cost table has no request buckets to plot")
    cols = min(3, len(bcaps))
    rows = math.ceil(len(bcaps) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.2 * rows), dpi=100)
    FigureCanvasAgg(fig)
    heldout = (meta.heldout or {}).get("median_rel_error")
    title = f"{meta.algorithm} {meta.mode}: {model.kind} fit, {meta.dtype} on {meta.device_type}"
    if heldout is not None:
        title += f" (held-out median error {100 * heldout:.1f}%)"
    fig.suptitle(title, fontsize=10)
    for i, b in enumerate(bcaps):
        ax = fig.add_subplot(rows, cols, i + 1)
        pts = by_bcap.get(b, [])
        if pts:
            ax.scatter([p.x for p in pts], [1000 * p.cost_s for p in pts], s=14, alpha=0.7, label="measured")
        # the model at this bucket's calibrated shapes (the only ones serving uses)
        xs = sorted({p.x for p in pts} | set(meta.grid.get(b, [])))
        fit = [(x, model.cost_ms(b, x)) for x in xs]
        fit = [(x, c) for x, c in fit if c is not None]
        if fit:
            ax.plot([x for x, _ in fit], [c for _, c in fit], color="C1", marker="x", label=f"{model.kind} model")
        ax.set_title(f"Bcap {b}", fontsize=9)
        ax.set_xlabel(meta.x_name)
        ax.set_ylabel("ms / round")
        ax.grid(True, alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, format="png")
    return out
