"""Adaptive verify while no request waits for a slot: each request's extra tokens weighed by what its earlier exit
saves (issue 13; adaptive/closed_batch.py, verify_budget's token_value).

The weights only change which prefixes the round admits and how much it speculates, never what the target
samples, so greedy output stays exact through them (the engine test below), and with requests waiting nothing
changes.
"""

from __future__ import annotations

import numpy as np
import pytest

from adaspec.adaptive.closed_batch import closed_batch_value, closed_batch_values, plain_curve, rank_probabilities
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


def test_plain_curve_is_linear_between_buckets_from_zero():
    assert plain_curve(6, [1, 4, 8], PLAIN) == pytest.approx([0.0, 12.0, 14.0, 16.0, 18.0, 20.0, 22.0])
    assert plain_curve(16, [1, 4, 8], PLAIN) is None  # no bucket covers 16
    assert plain_curve(2, [4, 8], PLAIN) == pytest.approx([0.0, 4.5, 9.0])


def test_rank_probabilities_are_distributions_and_order_by_remaining_work():
    dists = rank_probabilities([40, 10, 200, 40])
    for d in dists:
        assert len(d) == 4 and sum(d) == pytest.approx(1.0) and min(d) >= 0.0
    expected_after = [sum(k * p for k, p in enumerate(d)) for d in dists]  # requests finishing after each
    assert expected_after[1] > expected_after[0] > expected_after[2]
    assert expected_after[0] == pytest.approx(expected_after[3])
    assert dists[2][0] > 0.99  # 200 tokens to go against 40 at most: surely the last
    assert dists[1][3] > 0.99  # 10 against 40 and more: surely the first


def test_equal_work_is_worth_a_whole_token_and_the_values_average_one():
    buckets = [1, 4, 8]
    assert closed_batch_values((256,) * 4, 0, buckets, PLAIN) is None  # every request alike: each weighs 1
    for d in rank_probabilities((256,) * 4):  # which is what the ranks say: each is equally likely
        assert d == pytest.approx([0.25] * 4, abs=1e-6)
    rng = np.random.default_rng(1)
    for _ in range(20):
        B = int(rng.integers(2, 9))
        rem = tuple(int(x) for x in rng.integers(0, 300, size=B))
        v = closed_batch_values(rem, 0, buckets, PLAIN)
        assert len(v) == B and sum(v) == pytest.approx(B) and min(v) >= 0.0
        # more work to go never weighs less (a later exit saves at least as much: c is increasing here)
        order = sorted(range(B), key=lambda i: rem[i])
        assert all(v[a] <= v[b] + 1e-9 for a, b in zip(order, order[1:]))


def test_a_request_sure_to_leave_first_weighs_its_exit_and_the_last_one_the_tail():
    # three requests with 256 tokens to go, one with 8: it leaves with 4 running, saving c(4) - c(3) = 2 ms, while the
    # others share c(1) + c(2) - c(1) + c(3) - c(2) = c(3) = 16 ms; scaled to average 1 (sum 18 ms over 4 requests)
    v = closed_batch_values((8, 256, 256, 256), 0, [1, 4, 8], PLAIN)
    assert v[0] == pytest.approx(4 * 2.0 / 18.0, rel=1e-3)
    assert v[1:] == pytest.approx((4 * 16.0 / 3 / 18.0,) * 3, rel=1e-3)
    # one request with far more to go than three that are nearly done carries the batch's tail, c(1) = 12 ms
    v = closed_batch_values((300, 2, 3, 2), 0, [1, 4, 8], PLAIN)
    assert v[0] == pytest.approx(4 * 12.0 / 18.0, rel=1e-3) and max(v[1:]) < 0.5


def test_no_weights_when_a_slot_is_awaited_for_one_request_or_without_plain_costs():
    assert closed_batch_values((8, 256), 1, [1, 4, 8], PLAIN) is None  # a freed slot is taken at once
    assert closed_batch_values((8,), 0, [1, 4, 8], PLAIN) is None
    assert closed_batch_values((8, 256), 0, [1, 4, 8], lambda b: None) is None
    assert closed_batch_values(tuple(range(16)), 0, [1, 4, 8], PLAIN) is None  # no plain cost covers 16
    assert closed_batch_values((8, 256), 0, [1], {1: 20.0}.get) is None  # bucket 1 does not cover 2 requests
    # c linear through c(0) = 0: every exit saves alike, every token weighs 1; with c(1) = 15, c(2) = 20 the first to
    # leave saves 5, the last 15
    assert closed_batch_values((8, 256), 0, [2], {2: 20.0}.get) == pytest.approx((1.0, 1.0))
    assert closed_batch_values((8, 256), 0, [1, 2], {1: 15.0, 2: 20.0}.get) == pytest.approx((0.5, 1.5), abs=1e-6)
    assert closed_batch_values((5, 6), 0, [2], {2: 0.0}.get) is None  # a zero plain cost is no cost


def test_per_request_weights_rank_the_candidates_and_weigh_their_gain():
    cost = lambda bcap, rows: 10.0 + 1.0 * rows  # noqa: E731
    pad = lambda bcap, rows: rows  # noqa: E731
    P = [[0.9, 0.8, 0.7], [0.85, 0.75, 0.6]]
    assert sync_admission(P, 2, cost, pad, token_value=(1.0, 1.0)) == sync_admission(P, 2, cost, pad)
    # request 1 weighs 1.8, request 0 0.2: request 1's prefix is admitted, request 0's is not worth its row
    d = sync_admission(P, 2, cost, pad, token_value=(0.2, 1.8))
    assert d.verify_lens[0] == 0 and d.verify_lens[1] == 3
    assert d.predicted == pytest.approx((2 + 1.8 * (0.85 + 0.75 + 0.6)) / cost(2, 5))
    with pytest.raises(ValueError, match="2 requests"):
        sync_admission(P, 2, cost, pad, token_value=(1.0,))
    rng = np.random.default_rng(0)
    for _ in range(50):  # any weights: admitted drafts within each cap, and the objective is what they are worth
        Q = np.cumprod(rng.uniform(0.2, 1.0, size=(4, 5)), axis=1)
        w = tuple(float(x) for x in rng.uniform(0.0, 3.0, size=4))
        d = sync_admission(Q, 4, cost, pad, max_lens=[5, 2, 0, 5], token_value=w)
        lens = d.verify_lens
        assert lens[1] <= 2 and lens[2] == 0 and all(0 <= n <= 5 for n in lens)
        worth = 4 + sum(w[b] * float(Q[b, :lens[b]].sum()) for b in range(4))
        assert d.predicted == pytest.approx(worth / cost(4, 4 + sum(lens)))


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
        seen.append((len(decoding), len(eng.scheduler.waiting), ctl.token_value(len(decoding)),
                     ctl.request_values(decoding), plan))
        return plan

    ctl._plan_local = spy
    done = llm.generate(PROMPTS, params)  # 6 requests, 4 slots: two wait at first, none at the end
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids, (mode, i)
    assert any(w > 0 for _, w, _, _, _ in seen) and any(w == 0 and B > 1 for B, w, _, _, _ in seen)
    spread = 0
    for B, waiting, value, values, plan in seen:
        assert 0.0 <= value <= 1.0
        if waiting or B <= 1:
            assert value == 1.0 and values == 1.0
        elif values != value:  # unequal work to go: the batch's value spread over its requests
            spread += 1
            assert len(values) == B and sum(values) == pytest.approx(B * value) and min(values) >= 0.0
        if plan.num_steps and plan.admission in ("sync", "budget"):
            assert plan.token_value == values  # what the runner's admission uses
    assert spread > 0  # the closed rounds with unequal work to go were weighed per request
