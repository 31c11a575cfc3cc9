"""Adaptive verify while no request waits for a slot: extra tokens weighed by what they save (issue 13;
adaptive/closed_batch.py, verify_budget's token_value).

The weight only scales how much the round speculates, never which candidate ranks first, so greedy
output stays exact through it (the engine test below), and with requests waiting nothing changes.
"""

from __future__ import annotations

import numpy as np
import pytest

from adaspec.adaptive.closed_batch import closed_batch_value
from adaspec.adaptive.verify_budget import budget_from_lagged, sync_admission
from test_adaptive_engine import PROMPTS, _engine, _mode_flags, cal_files, plain  # noqa: F401 (fixtures)

PLAIN = {1: 12.0, 4: 18.0, 8: 26.0}.get  # plain-round ms per request bucket: 2 ms per extra request


def test_value_is_what_leaving_one_round_early_saves_over_a_tokens_share():
    # B = 4: c(4) - c(3) = 2 ms against 18 / 4 = 4.5 ms per decoded token
    assert closed_batch_value(4, 0, [1, 4, 8], PLAIN) == pytest.approx(2.0 / 4.5)
    # between buckets, c is linear: c(6) = 22, c(6) - c(5) = 2
    assert closed_batch_value(6, 0, [1, 4, 8], PLAIN) == pytest.approx(2.0 * 6 / 22.0)
    # one request: each of its tokens ends the batch a round sooner
    assert closed_batch_value(1, 0, [1, 4, 8], PLAIN) == 1.0
    # the lowest bucket interpolates from c(0) = 0: no discount
    assert closed_batch_value(4, 0, [4, 8], PLAIN) == pytest.approx(1.0)
    # a request waiting for a slot: a slot freed early is taken at once, every token counts
    assert closed_batch_value(4, 1, [1, 4, 8], PLAIN) == 1.0
    # no plain cost covers B, or none at all: today's rule
    assert closed_batch_value(16, 0, [1, 4, 8], PLAIN) == 1.0
    assert closed_batch_value(4, 0, [1, 4, 8], lambda b: None) == 1.0
    # a bucket dearer per request below than above it would give a negative slope: clipped to 0
    assert closed_batch_value(4, 0, [1, 4], {1: 20.0, 4: 18.0}.get) == 0.0


def test_the_budget_weighs_only_the_extra_tokens():
    lagged = [np.full((4, 3), 0.6)]
    cost = {4: 20.0, 8: 24.0, 16: 48.0}.get
    d = budget_from_lagged(lagged, 4, 4, lambda b, G: cost(G), {4: [4, 8, 16]}, plain_cost=18.0)
    assert d.reason == "argmax" and d.G == 8  # (4 + 2.4) / 24 = 0.267 beats 4 / 18 = 0.222
    d = budget_from_lagged(lagged, 4, 4, lambda b, G: cost(G), {4: [4, 8, 16]}, plain_cost=18.0, token_value=0.44)
    assert d.reason == "plain" and d.G == 4  # (4 + 0.44 * 2.4) / 24 = 0.211: plain wins
    assert d.predicted[8] == pytest.approx((4 + 0.44 * 2.4) / 24)


def test_sync_admission_with_a_lower_value_admits_a_prefix_of_the_same_ranking():
    rng = np.random.default_rng(0)
    cost = lambda bcap, rows: 10.0 + 1.0 * rows  # noqa: E731
    pad = lambda bcap, rows: rows  # noqa: E731
    for _ in range(50):
        P = np.cumprod(rng.uniform(0.2, 1.0, size=(4, 5)), axis=1)
        full = sync_admission(P, 4, cost, pad)
        low = sync_admission(P, 4, cost, pad, token_value=0.4)
        assert all(a <= b for a, b in zip(low.verify_lens, full.verify_lens))
        assert sum(low.verify_lens) <= sum(full.verify_lens)


@pytest.mark.parametrize("mode", ["verify_sync", "verify_async", "mtp_verify_async"])
def test_a_closed_batch_stays_exact_and_a_waiting_queue_restores_full_value(tiny_llama_dir, plain, linear_backend,  # noqa: F811
                                                                            cal_files, mode):  # noqa: F811
    params, ref = plain
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **_mode_flags(mode, cal_files))
    eng = llm.engine
    ctl = eng.control
    assert ctl.table.metadata.plain_ms  # calibrated with plain rounds: the weight applies
    seen = []
    original = ctl._plan_local

    def spy(decoding, caps, round_id):
        plan = original(decoding, caps, round_id)
        seen.append((len(decoding), len(eng.scheduler.waiting), ctl.token_value(len(decoding)), plan))
        return plan

    ctl._plan_local = spy
    done = llm.generate(PROMPTS, params)  # 6 requests, 4 slots: two wait at first, none at the end
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids, (mode, i)
    assert any(w > 0 for _, w, _, _ in seen) and any(w == 0 and B > 1 for B, w, _, _ in seen)
    for B, waiting, value, plan in seen:
        assert 0.0 <= value <= 1.0
        if waiting or B <= 1:
            assert value == 1.0
        if plan.admission == "sync":
            assert plan.token_value == value  # what the runner's admission uses
