"""Issue 13 (R-D3a, adaspec's extension): the synchronous gate's window over the newest rounds, and the stream's
correction of the draft's confidences (adaptive/draft_calibration.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import adaspec.adaptive.verify_controller as vc
from adaspec.adaptive.draft_calibration import MAX_RATIO, ConfidenceRatio
from adaspec.adaptive.host_paths import clean_rows, scaled_rows
from adaspec.adaptive.scoring import path_probabilities
from adaspec.adaptive.verify_budget import sync_admission
from adaspec.adaptive.verify_controller import VerifyController

WIDTH = 5
COSTS = {1: 1.1, 2: 1.35, 3: 1.5, 4: 1.6, 5: 1.7, 6: 1.8}  # drafted rounds at one request; a plain round costs 1.0


def _sync(mode: str = "sync") -> VerifyController:
    return VerifyController(WIDTH, lambda bcap, G: COSTS.get(G), lambda B: 1 if B == 1 else None,
                            {1: sorted(COSTS)}, mode=mode, lag=1, plain_ms=lambda bcap, kv: 1.0)


def test_confidence_ratio_counts_the_verified_positions_only():
    P = np.array([[0.5, 0.25, 0.125]])
    assert ConfidenceRatio.counts(P, [2], [2]) == (1, 0.75, 2.0)  # position 3 was not verified
    assert ConfidenceRatio.counts(P, [0], [0]) == (1, 0.0, 0.0)
    r = ConfidenceRatio(window_requests=2, prior_tokens=4.0)
    assert r.ratio() == 1.0  # the prior alone
    r.push((1, 0.75, 2.0))
    assert r.ratio() == pytest.approx((2.0 + 4.0) / (0.75 + 4.0))
    r.push((1, 1.0, 0.0))
    r.push((1, 1.0, 0.0))  # the first round leaves the window of 2 request-rounds
    assert r.ratio() == pytest.approx(4.0 / 6.0)
    r.push((1, 0.0, 50.0))
    assert r.ratio() == MAX_RATIO  # clipped
    with pytest.raises(ValueError):
        ConfidenceRatio(window_requests=0)
    Pt = torch.tensor([[0.8, 0.4]])
    rows = clean_rows(Pt)
    assert scaled_rows(rows, 2.0) == [[1.0, 0.800000011920929]] and scaled_rows(rows, 1.0) is rows
    assert ConfidenceRatio.counts([[0.5, 0.25, 0.125]], [2], [2]) == (1, 0.75, 2.0)  # rows as the controller keeps them


def test_window_drafts_when_drafting_pays_on_average_though_the_newest_round_was_unconfident(no_cold_draft):
    """The newest round alone kept a stream plain after one unconfident round until the next probe (stop 59: DSpark
    prose at one request drafted in 17% of rounds at 0.86x its fixed L3); the window averages what each round's
    own early stop would have admitted."""
    sure, unsure = np.full((1, WIDTH), 0.95), np.full((1, WIDTH), 0.05)
    ctrl = _sync()
    ctrl.observe(sure, round_id=0)
    ctrl.observe(unsure, round_id=1)
    assert ctrl.predicts_gain(1, round_id=2)  # (5.29 + 1) / (1.7 + 1.1) > 1 / 1.0
    old = _sync()
    old.observe(sure, round_id=0)
    old.observe(unsure, round_id=1)
    vc_requests = vc.GATE_REQUESTS
    try:
        vc.GATE_REQUESTS = 1  # a window of the newest round only: the rule before
        assert not old.predicts_gain(1, round_id=2)
    finally:
        vc.GATE_REQUESTS = vc_requests
    for i in range(2, 2 + vc.GATE_REQUESTS):  # the confident round ages out of the window
        ctrl.observe(unsure, round_id=i)
    assert not ctrl.predicts_gain(1, round_id=2 + vc.GATE_REQUESTS)
    assert len(ctrl.recent) <= vc.GATE_REQUESTS


def test_window_never_gains_from_drafts_nothing_is_admitted_from(no_cold_draft):
    """A drafted round that admits nothing costs at least a plain round, whatever the table says."""
    ctrl = VerifyController(WIDTH, lambda bcap, G: 0.5 if G == 1 else 100.0, lambda B: 1, {1: [1, 6]}, mode="sync",
                            lag=1, plain_ms=lambda bcap, kv: 1.0)
    for i in range(4):
        ctrl.observe(np.full((1, WIDTH), 0.5), round_id=i)
    assert not ctrl.predicts_gain(1, round_id=4)


def test_the_streams_confidence_ratio_moves_the_gate_and_the_admission(no_cold_draft):
    """An underconfident draft (accepts far more than its path probabilities say): at ratio 1 the gate keeps the
    stream plain; once the verified rounds show it, the corrected probabilities draft and admit more. Async mode
    keeps its estimate uncorrected."""
    scores = np.full((1, WIDTH), 0.3)
    P = path_probabilities(scores)
    ctrl = _sync()
    ctrl.observe(scores, round_id=0)
    assert ctrl.confidence_ratio() == 1.0
    assert not ctrl.predicts_gain(1, round_id=1)  # (1 + 0.3) / 1.35 < 1 / 1.0
    ctrl = _sync()
    ctrl.observe(scores, round_id=0, verify_lens=[WIDTH], accepted=[WIDTH])  # every verified token accepted
    ctrl.observe(scores, round_id=1, verify_lens=[WIDTH], accepted=[WIDTH])
    assert ctrl.predicts_gain(1, round_id=2)
    r = ctrl.confidence_ratio()
    assert r == MAX_RATIO
    lens = ctrl.admit(torch.tensor(P))
    assert lens == sync_admission(scaled_rows(clean_rows(torch.tensor(P)), r), 1, ctrl.cost_ms, ctrl.pad_rows).verify_lens
    assert lens[0] > sync_admission(torch.tensor(P), 1, ctrl.cost_ms, ctrl.pad_rows).verify_lens[0]
    async_ctrl = _sync("async")
    async_ctrl.observe(scores, round_id=0, verify_lens=[WIDTH], accepted=[WIDTH])
    assert async_ctrl.confidence is None and async_ctrl.confidence_ratio() == 1.0
