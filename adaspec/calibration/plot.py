"""PNG of measured whole-round costs vs the fitted model, one panel per request bucket (issue 4, item 6).

matplotlib is optional (`pip install 'adaspec[plot]'`) and imported lazily; the figure is drawn on
an Agg canvas without touching pyplot's global state, rendered in memory and written as a new file
(never overwritten, never half-written: adaspec/outputs.py).
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

from ..outputs import write_new_file
from .cost_table import CostTable


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed."""


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
    buf = io.BytesIO()
    fig.savefig(buf, format="png")  # rendered in memory: a failure leaves no partial file
    return write_new_file(Path(path), buf.getvalue(), "--plot", "plot")
