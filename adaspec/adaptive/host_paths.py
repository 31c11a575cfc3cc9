"""Path probabilities on the host as Python lists: the synchronous controller's per-round arithmetic.

Every round the sync verify controller reads the draft's path probabilities a few times (the admission, the
gate's predictions, the confidence counts), over a few dozen candidates (B requests x w positions). At that size
numpy's per-call overhead, not arithmetic, was the controller's time: ~0.7 ms a round at one request on the
Xeon VM of stop 62, 1.6% of a 44 ms round (`bench/results/s62/ctl_times.py`). These functions do the same
float64 arithmetic on lists: the same values (the tensors' float32 values read as Python floats; cumulative
products and sums in the same order numpy takes them; `np.interp`'s formula), so admissions and gate decisions
are those of the numpy code (`bench/results/s62/host_paths_equiv.py`).

Rows are lists of floats, one per request: `clean_rows` gives path probabilities in [0, 1], non-increasing along
each row (scoring.py's contract for a cumulative product of scores in [0, 1]).
"""

from __future__ import annotations

from itertools import accumulate
from typing import Sequence

import numpy as np
import torch

Rows = list[list[float]]


def _rows_of(P) -> list:
    if isinstance(P, torch.Tensor):
        if P.dim() != 2:
            raise ValueError(f"path probabilities must be [B, w], got shape {tuple(P.shape)}")
        return P.detach().cpu().tolist()
    if isinstance(P, np.ndarray):
        if P.ndim != 2:
            raise ValueError(f"path probabilities must be [B, w], got shape {P.shape}")
        return P.tolist()
    rows = [list(r) for r in P]
    if any(len(r) != len(rows[0]) for r in rows):
        raise ValueError("path probabilities must be [B, w]: rows of different lengths")
    return rows


def _unit(x: float) -> float:
    """NaN -> 0, clamped to [0, 1] (infinities to the bounds)."""
    x = float(x)
    if x != x:
        return 0.0
    return 1.0 if x > 1.0 else (0.0 if x < 0.0 else x)


def clean_rows(P) -> Rows:
    """[B][w] path probabilities (tensor, array or nested sequence): NaN -> 0, clamped to [0, 1], made
    non-increasing along each row (running minimum; a no-op for a cumulative product of scores in [0, 1])."""
    out = []
    for row in _rows_of(P):
        m, clean = 1.0, []
        for x in row:
            x = _unit(x)
            if x < m:
                m = x
            clean.append(m)
        out.append(clean)
    return out


def paths_from_scores(scores: Sequence[Sequence[float]]) -> Rows:
    """Per request, the cumulative product of its scores clamped to [0, 1] (NaN = 0): scoring.path_probabilities
    in float64 on lists."""
    out = []
    for row in scores:
        p, path = 1.0, []
        for s in row:
            p *= _unit(s)
            path.append(p)
        out.append(path)
    return out


def scaled_rows(rows: Rows, r: float) -> Rows:
    """min(1, r * P) on clean rows (draft_calibration.scaled); the rows themselves when r == 1."""
    if r == 1.0:
        return rows
    return [[min(1.0, x * r) for x in row] for row in rows]


def _interp(x: float, fp: list[float]) -> float:
    """np.interp(x, arange(len(fp)), fp): fp's ends outside, numpy's slope formula inside."""
    if x <= 0.0:
        return fp[0]
    last = len(fp) - 1
    if x >= last:
        return fp[last]
    j = int(x)
    if j == x:
        return fp[j]
    return (fp[j + 1] - fp[j]) * (x - j) + fp[j]


def top_sums(lagged: Sequence, B: int, w: int) -> list[float]:
    """[B * w + 1]: E[sum of the top n current path probabilities], n = 0..B*w, from lagged rounds scaled to B
    requests (verify_budget.expected_top_sums), averaged over the rounds."""
    total = [0.0] * (B * w + 1)
    for P_r in lagged:
        rows = clean_rows(P_r)
        B_r = len(rows)
        if B_r == 0:
            raise ValueError("lagged round has no requests")
        if len(rows[0]) != w:
            raise ValueError(f"lagged round has width {len(rows[0])}, current width is {w}")
        cum = [0.0, *accumulate(sorted((x for row in rows for x in row), reverse=True))]
        if B_r == B:  # a round of the current batch size needs no scaling (the sync gate reads one every round)
            total = [t + c for t, c in zip(total, cum)]
        else:
            total = [t + (B / B_r) * _interp(n * B_r / B, cum) for n, t in enumerate(total)]
    k = len(lagged)
    return [t / k for t in total]
