"""Measured cost points and the additive grid's connectivity (R-F1). Pure numpy, no torch.

A measured point is `(bcap, x, cost_s)`: `bcap` is the padded request bucket, `x` the padded
target rows `G` (adaptive verify) or the draft step count `k` (adaptive draft step), `cost_s` the
seconds of one whole round. `as_points` validates them, `cell_medians` reduces them to one median
per (bcap, x) cell, and `grid_components` / `check_connected` say whether the bipartite graph
bcap -- x of the measured cells is connected, which the additive model needs (cost_models).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, NamedTuple, Union

import numpy as np


class CostModelError(ValueError):
    """Measurements cannot be fitted (empty, invalid, or an additive grid that is not connected)."""


class CostPoint(NamedTuple):
    """One measured window: padded request bucket, padded target rows G (or step count k), seconds per round."""

    bcap: int
    x: int
    cost_s: float
    kv_len: int | None = None  # mean KV length during the window, informational (plots/reports)

    @property
    def g(self) -> int:
        return self.x


PointLike = Union[CostPoint, tuple, Any]


def as_points(points: Iterable[PointLike]) -> tuple[CostPoint, ...]:
    """Normalise tuples `(bcap, x, cost_s[, kv_len])` or objects with `bcap`, `x` (or `g`), `cost_s`
    (and optionally `kv_len`) into validated `CostPoint`s."""
    out = []
    for i, p in enumerate(points):
        try:
            if isinstance(p, tuple):
                bcap, x, cost = p[0], p[1], p[2]
                kv = p[3] if len(p) > 3 else None
            else:
                bcap = p.bcap
                x = p.x if hasattr(p, "x") else p.g
                cost, kv = p.cost_s, getattr(p, "kv_len", None)
        except (AttributeError, IndexError, TypeError) as e:
            raise CostModelError(f"point {i}: expected (bcap, x, cost_s[, kv_len]), got {p!r}") from e
        if isinstance(bcap, bool) or isinstance(x, bool) or int(bcap) != bcap or int(x) != x:
            raise CostModelError(f"point {i}: bcap and x must be integers, got {p!r}")
        bcap, x, cost = int(bcap), int(x), float(cost)
        if bcap < 1 or x < 0:  # x = 0: a draft-step round with no drafts
            raise CostModelError(f"point {i}: bcap must be >= 1 and x >= 0, got {p!r}")
        if not math.isfinite(cost) or cost <= 0:
            raise CostModelError(f"point {i}: cost_s must be a finite positive number of seconds, got {p!r}")
        out.append(CostPoint(bcap, x, cost, None if kv is None else int(kv)))
    return tuple(out)


def cell_medians(points: Iterable[PointLike]) -> dict[tuple[int, int], float]:
    """Median cost (seconds) of every measured (bcap, x) cell, keys sorted."""
    cells: dict[tuple[int, int], list[float]] = {}
    for p in as_points(points):
        cells.setdefault((p.bcap, p.x), []).append(p.cost_s)
    return {k: float(np.median(cells[k])) for k in sorted(cells)}


def grid_components(cells: Iterable[tuple[int, int]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Connected components of the bipartite graph bcap -- x; each as (sorted bcaps, sorted xs),
    ordered by smallest bcap."""
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def find(n):
        parent.setdefault(n, n)
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for b, x in cells:
        rb, rx = find(("b", b)), find(("x", x))
        if rb != rx:
            parent[rb] = rx
    comps: dict[tuple[str, int], tuple[set, set]] = {}
    for node in list(parent):
        bs, xs = comps.setdefault(find(node), (set(), set()))
        (bs if node[0] == "b" else xs).add(node[1])
    return sorted(((tuple(sorted(b)), tuple(sorted(x))) for b, x in comps.values()), key=lambda c: c[0] or (0,))


def describe_components(comps, x_name: str = "G") -> str:
    return "; ".join(
        f"component {i + 1}: Bcap {list(b)} with {x_name} {list(x)}" for i, (b, x) in enumerate(comps)
    )


def check_connected(cells: Iterable[tuple[int, int]], x_name: str = "G") -> None:
    """Raise CostModelError naming the disconnected request buckets if the bcap--x grid is not connected."""
    comps = grid_components(cells)
    if len(comps) > 1:
        raise CostModelError(
            f"the additive cost grid is not connected through shared {x_name} values, so alpha(Bcap) and "
            f"theta({x_name}) of different groups cannot be separated: {describe_components(comps, x_name)}. "
            f"Fix: measure at least one {x_name} value shared between these request buckets "
            f"(add it to their target_graph_rows) or use model \"sps\""
        )
