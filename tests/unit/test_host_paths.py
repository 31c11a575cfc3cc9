"""adaptive/host_paths.py: the sync controller's list arithmetic gives numpy's values exactly (R-D3a: the admission
and the gate decide on these numbers, so the list version must not move a decision)."""

import numpy as np
import pytest
import torch

from adaspec.adaptive.host_paths import clean_rows, paths_from_scores, scaled_rows, top_sums


def _numpy_top_sums(lagged, B, w):
    """verify_budget.expected_top_sums as numpy computed it before stop 62."""
    n = np.arange(B * w + 1, dtype=np.float64)
    total = np.zeros(B * w + 1)
    for P in lagged:
        P = np.minimum.accumulate(np.clip(np.nan_to_num(np.asarray(P, dtype=np.float64), nan=0.0), 0, 1), axis=1)
        B_r = P.shape[0]
        cum = np.concatenate(([0.0], np.cumsum(np.sort(P.reshape(-1))[::-1])))
        total += cum if B_r == B else (B / B_r) * np.interp(n * B_r / B, np.arange(len(cum)), cum)
    return total / len(lagged)


def test_clean_rows_nan_bounds_and_running_minimum():
    P = torch.tensor([[0.9, float("nan"), 0.5], [1.5, 0.7, 0.8], [-0.2, float("inf"), 0.1]])
    assert clean_rows(P) == [[pytest.approx(0.9), 0.0, 0.0], [1.0, pytest.approx(0.7), pytest.approx(0.7)],
                             [0.0, 0.0, 0.0]]
    rows = clean_rows(np.array([[0.4, 0.2]]))
    assert rows == [[0.4, 0.2]] and clean_rows(rows) == rows
    with pytest.raises(ValueError):
        clean_rows(torch.zeros(3))
    with pytest.raises(ValueError):
        clean_rows([[0.1, 0.2], [0.3]])


def test_list_arithmetic_equals_numpy_exactly():
    rng = np.random.default_rng(7)
    for _ in range(300):
        B, w = int(rng.integers(1, 9)), int(rng.integers(1, 8))
        scores = rng.random((B, w)) ** rng.uniform(0.2, 3)
        if rng.random() < 0.3:
            scores[0, 0] = np.nan
        P = np.cumprod(np.clip(np.nan_to_num(scores, nan=0.0), 0, 1), axis=1)
        assert paths_from_scores(scores.tolist()) == P.tolist()
        t = torch.tensor(P, dtype=torch.float32)
        assert clean_rows(t) == t.double().numpy().tolist()  # float32 values read exactly
        r = float(rng.uniform(0.5, 2))
        assert scaled_rows(P.tolist(), r) == np.minimum(P * r, 1.0).tolist()
        lagged = [np.round(np.cumprod(rng.random((int(rng.integers(1, 9)), w)), axis=1), int(rng.integers(1, 4)))
                  for _ in range(int(rng.integers(1, 4)))]  # rounding: ties in the sort
        assert top_sums(lagged, B, w) == _numpy_top_sums(lagged, B, w).tolist()
    with pytest.raises(ValueError):
        top_sums([np.zeros((2, 3))], 2, 4)  # a lagged round of another width
