"""The draft step controller's hot path (issue 13: its own time is most of what the draft step loses to plain decoding
where plain is right): the Python-float forms compute exactly what the numpy forms they replaced did, bit for bit,
the engine's closed-batch view is computed only when a score reads it, and the served-ratio record stays bounded."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from adaspec.adaptive.batch_acceptance import request_prefix_acceptance, wilson_upper_array
from adaspec.adaptive.closed_step import closed_throughput, spec_tokens
from adaspec.adaptive.feedback import AcceptanceWindow
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy
from adaspec.adaptive.step_served import NEIGHBOURS, ServedRatio


def _numpy_rows(batch, counts, pooled, z, shrink=4.0):
    """The numpy form request_prefix_acceptance had before (stop 55), kept here as the reference."""
    zb = z / math.sqrt(len(batch)) if z > 0 else 0.0
    succ = np.tile(shrink * np.asarray(pooled, dtype=np.float64), (len(batch), 1))
    trials = np.full(succ.shape, float(shrink))
    for j, rid in enumerate(batch):
        c = counts(rid)
        if c is not None:
            succ[j] += c[0]
            trials[j] += c[1]
    return np.cumprod(wilson_upper_array(succ, trials, zb), axis=1)


def _numpy_closed(prefix, k, closed, table_at):
    """The numpy form of closed_throughput before stop 56, the reference."""
    spec = float(np.sum(np.asarray(prefix, dtype=np.float64)[:k]))
    n = np.array([max(0, int(r)) for r, _ in closed], dtype=np.float64)
    rho = [rho if np.isscalar(rho) else (rho[k - 1] if k else 1.0) for _, rho in closed]
    finish = np.sort(n / (1.0 + np.minimum(float(k), np.array([max(0.0, float(x)) for x in rho]) * spec)))
    total, before = 0.0, 0.0
    for j, f in enumerate(finish):
        total += (f - before) * table_at(len(finish) - j)[k]
        before = f
    return float(n.sum()) / total if total > 0 else 0.0


def test_spec_tokens_has_np_sums_bits():
    rng = random.Random(0)
    for _ in range(3000):
        a = np.cumprod([rng.random() for _ in range(rng.randint(1, 12))])
        for k in range(len(a) + 1):
            assert spec_tokens(a, k) == float(np.sum(a[:k]))
            assert spec_tokens(list(a), k) == float(np.sum(a[:k]))


@pytest.mark.parametrize("z", [0.0, 1.0, 2.0])
def test_request_rows_have_the_numpy_forms_bits(z):
    rng = random.Random(int(10 * z))
    for _ in range(400):
        positions, batch = rng.randint(1, 8), list(range(rng.randint(1, 12)))
        sums = {}
        for rid in batch:
            if rng.random() < 0.8:
                reached = sorted((rng.randint(0, 30) * rng.choice([1.0, 0.37]) for _ in range(positions)), reverse=True)
                sums[rid] = [[r * rng.random() for r in reached], reached]
        pooled = [rng.random() for _ in range(positions)]
        got = request_prefix_acceptance(batch, sums.get, pooled, z)
        assert got.tolist() == _numpy_rows(batch, sums.get, pooled, z).tolist()


def test_closed_throughput_has_the_numpy_forms_bits():
    rng = random.Random(3)
    tables = {b: {k: 20.0 + 3 * b + (7.0 + b) * k * rng.uniform(0.9, 1.1) for k in range(6)} for b in range(1, 9)}
    for _ in range(2000):
        prefix = np.cumprod([rng.random() for _ in range(5)])
        closed = [(rng.randint(-2, 300), rng.uniform(0, 2) if rng.random() < 0.5
                   else tuple(rng.uniform(0, 2) for _ in range(5))) for _ in range(rng.randint(1, 8))]
        for k in range(6):
            assert closed_throughput(prefix, k, closed, tables.get) == _numpy_closed(prefix, k, closed, tables.get)


def test_the_aged_pooled_estimate_has_the_numpy_forms_bits():
    """Without request ids the aged bound is the cumprod of the Wilson rates of the weighted window sums; the
    running sum in Python floats gives numpy's cumsum bits."""
    rng = random.Random(5)
    w = AcceptanceWindow(5, 20)
    for _ in range(30):
        lens = [rng.randint(0, 5) for _ in range(4)]
        w.observe(lens, [rng.randint(0, L) for L in lens])
    now, since, half = w.completed + 13, w.completed - 7, 17.0
    weights = np.array([0.5 ** (max(0, now - max(b[4], since)) / half) for b in w._batches])[:, None]
    acc = np.cumsum(weights * np.array([b[0] for b in w._batches], dtype=np.int64), axis=0)[-1]
    reach = np.cumsum(weights * np.array([b[1] for b in w._batches], dtype=np.int64), axis=0)[-1]
    expected = np.cumprod(w._rates(acc, reach, 1.0))
    assert w.aged_prefix_acceptance(1.0, now, since, half).tolist() == expected.tolist()


TABLE = {0: 21.77, 1: 33.4, 2: 45.5, 3: 61.4, 4: 77.9, 5: 85.3}


def _controller():
    return DraftStepController(5, StepPolicy(), lambda bcap, k: TABLE[k], lambda b: 4 if b <= 4 else None)


def test_a_closed_view_given_as_a_callable_decides_as_the_list_and_is_computed_only_to_score():
    """engine/control.py passes the closed view as a callable: the controller's decisions are those it makes on the
    list, and the callable runs only in batches that are scored (re-scores), not in every batch."""
    rng_a, rng_b = random.Random(7), random.Random(7)
    eager, lazy, calls = _controller(), _controller(), []

    def view(closed):
        calls.append(1)
        return closed
    rounds = 300
    for r in range(1, rounds + 1):
        closed = [(400 - r, 1.0)] * 4
        ks = [eager.plan(4, round_id=r, requests=[0, 1, 2, 3], closed=closed),
              lazy.plan(4, round_id=r, requests=[0, 1, 2, 3], closed=lambda c=closed: view(c))]
        assert ks[0] == ks[1]
        for ctrl, rng in ((eager, rng_a), (lazy, rng_b)):
            ctrl.observe([ks[0]] * 4, [int(ks[0] > 0 and rng.random() < 0.45) for _ in range(4)], round_id=r)
    assert list(eager.decisions) == list(lazy.decisions)
    assert 0 < len(calls) < rounds / 2


def test_served_rounds_stay_bounded_and_a_long_plain_stretch_still_samples_next_to_k1():
    served = ServedRatio()
    for r in range(1, 5001):  # a long stretch at k = 0: nothing to sample, nothing kept beyond the neighbourhood
        served.record(r, 4, 0, 20.0, True)
        assert len(served._rounds) <= 2 * NEIGHBOURS + 2
    assert served.samples(4) == []
    r = 5001
    for k in [1] * 6 + [0] + [1] * 6:  # k = 1 rounds, a plain one, k = 1 rounds
        served.record(r, 4, k, 26.0 if k else 20.0, True)
        r += 1
    # the stretch's last plain rounds with two steady k = 1 rounds (5002 on: 5001 follows a plain round) within
    # NEIGHBOURS, and the plain round between the runs
    assert [x for x, _ in served._samples[4]] == [4998, 4999, 5000, 5007]
    assert served.samples(4) == [pytest.approx(1.3)] * 4
