"""Whole-round cost models fitted from start-up measurements (R-F1, R-C3). Pure numpy, no torch.

A measured point is `(bcap, x, cost_s)`: `bcap` is the padded request bucket, `x` the padded
target rows `G` (adaptive verify) or the draft step count `k` (adaptive draft step), `cost_s` the
seconds of one WHOLE round (draft, verify, sampling, refresh, result retrieval). Nothing adds draft
or commit time on top of these costs again (R-F2).

Two models, both immutable, both `fit(points) -> model`, `cost_ms(bcap, x) -> float | None`:

* `SpsModel` -- steps per second as a function of x only. Per distinct x, SPS(x) is the median of
  1/cost over all its points (pooled across request buckets; `per_bucket=True` keeps one curve per
  bucket, used for adaptive draft step); the cost curve 1/SPS is then made
  non-decreasing in x by isotonic regression (pool-adjacent-violators, weighted by point count),
  which keeps real cliffs of a staircase curve and only irons out noise inversions. Per bucket (the
  draft step's curves, whose windows at one x differ only by noise and KV length) each x is weighted
  by its precision, windows / (relative spread^2 + SPREAD_FLOOR^2): where a disturbed x inverts the
  curve, the consistent neighbour holds its value and the disturbed one moves (issue 13: a k = 1 measured
  25.9 ms +-30% over a k = 2 at 22.7 ms +-2.6% pooled both at 24.3 ms, priced k = 1 at 1.57x plain against
  ~1.2x served, and the draft step ran plain for a quarter of its rounds). An x between
  two measured values is priced by linear interpolation of cost; outside [min x, max x], or for a
  request bucket that was never measured, the answer is None (uncovered -> caller falls back to
  full width, R-F7).
* `AdditiveModel` -- cost = bias + alpha[bcap] + theta[x] seconds, least squares over one-hot
  features fitted to the per-cell medians (one cell = one (bcap, x) pair; the median makes one
  disturbed window harmless and weighs cells equally), in relative terms and Huber-weighted
  (`robust_lstsq`: a cell far off the rest cannot bend the table).
  Identifiability: reference coding, alpha[smallest bcap] = 0 and theta[smallest x] = 0, so
  `bias` is the cost of the smallest cell. The bipartite graph bcap -- x of measured cells must be
  connected (otherwise alpha and theta of different components are not identifiable); a
  disconnected grid is refused with an error naming the components. Unmeasured x between two
  measured ones: theta is interpolated linearly. Unknown bcap, x outside the measured range, or a
  non-positive prediction -> None.

Measured points and the grid's connectivity live in `cost_points`; the leave-one-cell-out
held-out error in `heldout`.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Iterable, Literal, Union

import numpy as np

from .cost_points import CostModelError, CostPoint, PointLike, as_points, cell_medians, check_connected

ModelKind = Literal["additive", "sps"]
MODEL_KINDS: tuple[str, ...] = ("additive", "sps")


# a per-bucket x's relative spread counts as at least this in its precision weight: windows that agree by chance
# (three windows within 0.1%) would otherwise outweigh every neighbour by orders of magnitude
SPREAD_FLOOR = 0.02


def _isotonic_increasing(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted pool-adjacent-violators: the closest non-decreasing sequence in weighted L2."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for yi, wi in zip(y.tolist(), w.tolist()):
        blocks.append([yi, wi, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, c2 = blocks.pop()
            m1, w1, c1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    return np.array([m for m, _, c in blocks for _ in range(c)], dtype=np.float64)


def robust_lstsq(a: np.ndarray, y: np.ndarray, iters: int = 30, k: float = 1.345) -> tuple[np.ndarray, int]:
    """Least squares in relative terms, robust to outlying cells (issue 13).

    Every row is weighted by 1 / y, so the fit minimises *relative* errors (what the controllers
    compare and what the held-out error reports; in plain seconds a 700 ms cell outweighs a 50 ms
    one 200-fold). Then Huber weights (IRLS; scale = 1.4826 x the median absolute deviation of the
    relative residuals, k = 1.345) shrink rows that sit far from the rest, so one disturbed cell
    cannot bend the whole table. Exact data is fitted exactly. Returns (coefficients, rank)."""
    base = 1.0 / y
    coef, _, rank, _ = np.linalg.lstsq(a * base[:, None], y * base, rcond=None)
    for _ in range(iters):
        r = (a @ coef - y) / y
        scale = 1.4826 * float(np.median(np.abs(r - np.median(r))))
        if scale <= 1e-12:
            break
        w = base * np.sqrt(np.minimum(1.0, k * scale / np.maximum(np.abs(r), 1e-300)))
        new = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)[0]
        done = np.allclose(new, coef, rtol=1e-9, atol=1e-12)
        coef = new
        if done:
            break
    return coef, int(rank)


def _interp(xs: tuple[int, ...], ys: tuple[float, ...], x: int) -> float | None:
    """Linear interpolation inside [xs[0], xs[-1]] (exact at measured x), None outside."""
    if not xs or x < xs[0] or x > xs[-1]:
        return None
    i = bisect_left(xs, x)
    if xs[i] == x:
        return ys[i]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class SpsCurve:
    """Steps/s per measured x and the monotone cost curve derived from it."""

    x_values: tuple[int, ...]  # measured x, increasing
    sps: tuple[float, ...]  # raw median steps/s per x (before the monotone projection)
    cost_s: tuple[float, ...]  # fitted seconds per round per x, non-decreasing in x

    @classmethod
    def fit(cls, pts: Iterable[CostPoint], by_precision: bool = False) -> "SpsCurve":
        """The curve of `pts`; the monotone projection weighs each x by its window count, or with `by_precision`
        by its precision (module docstring)."""
        by_x: dict[int, list[float]] = {}
        for p in pts:
            by_x.setdefault(p.x, []).append(1.0 / p.cost_s)
        xs = tuple(sorted(by_x))
        sps = np.array([np.median(by_x[x]) for x in xs], dtype=np.float64)
        weights = np.array([len(by_x[x]) for x in xs], dtype=np.float64)
        if by_precision:
            spread = np.array([(max(by_x[x]) - min(by_x[x])) / np.median(by_x[x]) for x in xs], dtype=np.float64)
            weights = weights / (spread ** 2 + SPREAD_FLOOR ** 2)
        cost = _isotonic_increasing(1.0 / sps, weights)
        return cls(xs, tuple(float(v) for v in sps), tuple(float(c) for c in cost))

    def cost_s_at(self, x: int) -> float | None:
        return _interp(self.x_values, self.cost_s, x)

    def to_dict(self) -> dict:
        return {"x_values": list(self.x_values), "sps": list(self.sps), "cost_s": list(self.cost_s)}

    @classmethod
    def from_dict(cls, d: dict) -> "SpsCurve":
        c = cls(tuple(int(v) for v in d["x_values"]), tuple(float(v) for v in d["sps"]),
                tuple(float(v) for v in d["cost_s"]))
        if not (len(c.x_values) == len(c.sps) == len(c.cost_s)) or not c.x_values:
            raise CostModelError("invalid sps model in table: x_values, sps and cost_s differ in length or are empty")
        if list(c.x_values) != sorted(set(c.x_values)) or any(b < a for a, b in zip(c.cost_s, c.cost_s[1:])):
            raise CostModelError("invalid sps model in table: x_values must increase and cost_s must not decrease")
        return c


@dataclass(frozen=True)
class SpsModel:
    """Steps/s as a function of x only: cost_ms(bcap, x) = 1000 / SPS(x).

    Pooled (the R-F1 `sps` model, adaptive verify): one curve over G shared by every measured
    request bucket. `per_bucket=True` (adaptive draft step, where every (Bcap, k) is measured
    independently, R-C3): one curve over k per request bucket, since a step count alone says
    nothing about the batch size."""

    bcaps: tuple[int, ...]  # request buckets that were measured (coverage)
    curves: tuple[SpsCurve, ...]  # one curve (pooled) or one per entry of `bcaps`
    per_bucket: bool = False
    kind: str = "sps"

    @classmethod
    def fit(cls, points: Iterable[PointLike], per_bucket: bool = False) -> "SpsModel":
        pts = as_points(points)
        if not pts:
            raise CostModelError("no measured points to fit")
        bcaps = tuple(sorted({p.bcap for p in pts}))
        if per_bucket:
            curves = tuple(SpsCurve.fit((p for p in pts if p.bcap == b), by_precision=True) for b in bcaps)
        else:
            curves = (SpsCurve.fit(pts),)
        return cls(bcaps, curves, per_bucket)

    def curve(self, bcap: int) -> SpsCurve | None:
        if bcap not in self.bcaps:
            return None
        return self.curves[self.bcaps.index(bcap)] if self.per_bucket else self.curves[0]

    # the pooled curve's arrays (per-bucket models: use curve(bcap))
    @property
    def x_values(self) -> tuple[int, ...]:
        return self._pooled().x_values

    @property
    def sps(self) -> tuple[float, ...]:
        return self._pooled().sps

    @property
    def cost_s(self) -> tuple[float, ...]:
        return self._pooled().cost_s

    def _pooled(self) -> SpsCurve:
        if self.per_bucket:
            raise AttributeError("a per-bucket sps model has one curve per request bucket: use curve(bcap)")
        return self.curves[0]

    def cost_s_at(self, bcap: int, x: int) -> float | None:
        c = self.curve(bcap)
        return None if c is None else c.cost_s_at(x)

    def cost_ms(self, bcap: int, x: int) -> float | None:
        c = self.cost_s_at(bcap, x)
        return None if c is None else 1000.0 * c

    def steps_per_second(self, bcap: int, x: int) -> float | None:
        c = self.cost_s_at(bcap, x)
        return None if c is None else 1.0 / c

    def to_dict(self) -> dict:
        return {"kind": "sps", "per_bucket": self.per_bucket, "bcaps": list(self.bcaps),
                "curves": [c.to_dict() for c in self.curves]}

    @classmethod
    def from_dict(cls, d: dict) -> "SpsModel":
        try:
            m = cls(tuple(int(v) for v in d["bcaps"]), tuple(SpsCurve.from_dict(c) for c in d["curves"]),
                    bool(d.get("per_bucket", False)))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, CostModelError):
                raise
            raise CostModelError(f"invalid sps model in table: {e!r}") from e
        if not m.bcaps or len(m.curves) != (len(m.bcaps) if m.per_bucket else 1):
            raise CostModelError("invalid sps model in table: the number of curves does not match bcaps")
        return m


@dataclass(frozen=True)
class AdditiveModel:
    """cost = bias + alpha[bcap] + theta[x] seconds; alpha[bcaps[0]] = theta[x_values[0]] = 0."""

    bias_s: float
    bcaps: tuple[int, ...]
    alpha_s: tuple[float, ...]
    x_values: tuple[int, ...]
    theta_s: tuple[float, ...]
    residual_rms_s: float = 0.0  # RMS of the fit over the cell medians
    kind: str = "additive"

    IDENTIFIABILITY = "reference coding: alpha[smallest Bcap] = 0, theta[smallest x] = 0"

    @classmethod
    def fit(cls, points: Iterable[PointLike], x_name: str = "G") -> "AdditiveModel":
        cells = cell_medians(points)
        if not cells:
            raise CostModelError("no measured points to fit")
        check_connected(cells, x_name)
        bcaps = sorted({b for b, _ in cells})
        xs = sorted({x for _, x in cells})
        bi = {b: i for i, b in enumerate(bcaps)}
        xi = {x: i for i, x in enumerate(xs)}
        nb, nx = len(bcaps), len(xs)
        a = np.zeros((len(cells), 1 + (nb - 1) + (nx - 1)))
        y = np.empty(len(cells))
        for r, ((b, x), c) in enumerate(cells.items()):
            a[r, 0] = 1.0
            if bi[b] > 0:
                a[r, bi[b]] = 1.0
            if xi[x] > 0:
                a[r, nb - 1 + xi[x]] = 1.0
            y[r] = c
        coef, rank = robust_lstsq(a, y)
        if rank < a.shape[1]:  # cannot happen for a connected grid; guard anyway
            raise CostModelError(f"additive fit is rank deficient ({rank} < {a.shape[1]})")
        resid = a @ coef - y
        alpha = (0.0,) + tuple(float(v) for v in coef[1:nb])
        theta = (0.0,) + tuple(float(v) for v in coef[nb:])
        return cls(float(coef[0]), tuple(bcaps), alpha, tuple(xs), theta,
                   float(np.sqrt(np.mean(resid ** 2))))

    def alpha(self, bcap: int) -> float | None:
        return self.alpha_s[self.bcaps.index(bcap)] if bcap in self.bcaps else None

    def theta(self, x: int) -> float | None:
        return _interp(self.x_values, self.theta_s, x)

    def cost_s_at(self, bcap: int, x: int) -> float | None:
        a, t = self.alpha(bcap), self.theta(x)
        if a is None or t is None:
            return None
        c = self.bias_s + a + t
        return c if c > 0 else None

    def cost_ms(self, bcap: int, x: int) -> float | None:
        c = self.cost_s_at(bcap, x)
        return None if c is None else 1000.0 * c

    def to_dict(self) -> dict:
        return {"kind": "additive", "identifiability": self.IDENTIFIABILITY, "bias_s": self.bias_s,
                "bcaps": list(self.bcaps), "alpha_s": list(self.alpha_s),
                "x_values": list(self.x_values), "theta_s": list(self.theta_s),
                "residual_rms_s": self.residual_rms_s}

    @classmethod
    def from_dict(cls, d: dict) -> "AdditiveModel":
        try:
            m = cls(float(d["bias_s"]), tuple(int(v) for v in d["bcaps"]), tuple(float(v) for v in d["alpha_s"]),
                    tuple(int(v) for v in d["x_values"]), tuple(float(v) for v in d["theta_s"]),
                    float(d.get("residual_rms_s", 0.0)))
        except (KeyError, TypeError, ValueError) as e:
            raise CostModelError(f"invalid additive model in table: {e!r}") from e
        if len(m.bcaps) != len(m.alpha_s) or len(m.x_values) != len(m.theta_s) or not m.bcaps or not m.x_values:
            raise CostModelError("invalid additive model in table: bcaps/alpha_s or x_values/theta_s differ in length")
        if list(m.bcaps) != sorted(set(m.bcaps)) or list(m.x_values) != sorted(set(m.x_values)):
            raise CostModelError("invalid additive model in table: bcaps and x_values must increase")
        return m


CostModel = Union[SpsModel, AdditiveModel]


def fit_model(points: Iterable[PointLike], kind: str, x_name: str = "G", per_bucket: bool = False) -> CostModel:
    """Fit `kind` ("additive" | "sps"); `per_bucket` only affects sps (one curve per request bucket)."""
    if kind == "sps":
        return SpsModel.fit(points, per_bucket)
    if kind == "additive":
        return AdditiveModel.fit(points, x_name)
    raise CostModelError(f"unknown cost model {kind!r}; allowed: {', '.join(MODEL_KINDS)}")


def model_from_dict(d: dict) -> CostModel:
    kind = d.get("kind") if isinstance(d, dict) else None
    if kind == "sps":
        return SpsModel.from_dict(d)
    if kind == "additive":
        return AdditiveModel.from_dict(d)
    raise CostModelError(f"unknown cost model kind {kind!r} in table; allowed: {', '.join(MODEL_KINDS)}")
