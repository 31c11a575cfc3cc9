"""Adaptive target verify (R-D1, R-D3, R-D4, R-F6): ranking, prefixes, sync early stop, async budget."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adaspec.adaptive.verify_budget import (
    allocate_in_budget,
    budget_from_lagged,
    expected_top_sums,
    rank_order,
    sync_admission,
    unified_buckets,
)
from adaspec.adaptive.verify_controller import VerifyController
from adaspec.geometry import first_covering

BUCKETS = {1: [1, 4, 5, 6], 2: [2, 4, 6, 8], 4: [4, 8, 12, 16]}


def pad_rows(bcap, rows):
    return first_covering(BUCKETS[bcap], rows)


def pad_requests(B):
    return first_covering([1, 2, 4], B)


def cost_table(table):
    return lambda bcap, G: table.get(G)


P2 = [[0.9, 0.8, 0.3], [0.6, 0.2, 0.1]]  # B = 2, w = 3, non-increasing rows


def test_rank_order_ties_by_position_then_slot():
    """R-D3: rank by path probability, ties by position then slot (never token value)."""
    P = [[0.5, 0.5], [0.5, 0.25]]
    assert rank_order(P) == [(0, 0), (1, 0), (0, 1), (1, 1)]
    P = [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]
    assert rank_order(P) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]


def test_sync_admission_hand_computed():
    """R-D3a: admit while (B + sum P) / cost(Bcap, G) does not decrease; stop at the first decrease."""
    cost = cost_table({2: 10.0, 4: 12.0, 6: 16.0, 8: 24.0})
    d = sync_admission(torch.tensor(P2), 2, cost, pad_rows)
    # start 2/10 = 0.2; +0.9 -> 2.9/12 = 0.242; +0.8 -> 3.7/12 = 0.308; +0.6 -> 4.3/16 = 0.269 stop
    assert d.verify_lens == [2, 0]
    assert d.G == 4 and d.predicted == pytest.approx(3.7 / 12) and d.reason == "early stop"


def test_sync_admission_ties_admit_and_zero_paths_never():
    d = sync_admission([[0.5]], 1, cost_table({1: 1.0, 4: 1.5}), pad_rows)
    assert d.verify_lens == [1]  # 1/1 = 1.5/1.5: a predicted-free row is taken (Algorithm 1's >=)
    d = sync_admission([[0.5]], 1, cost_table({1: 1.0, 4: np.nextafter(1.5, 2.0)}), pad_rows)
    assert d.verify_lens == [0]
    d = sync_admission([[1.0, 0.0, 0.0]], 1, cost_table({1: 1.0, 4: 1.0}), pad_rows)
    assert d.verify_lens == [1] and d.reason == "all candidates admitted"


def test_sync_admission_respects_caps_and_falls_back_when_uncovered():
    cost = cost_table({2: 10.0, 4: 12.0, 6: 16.0, 8: 24.0})
    assert sync_admission(P2, 2, cost, pad_rows, max_lens=[1, 3]).verify_lens == [1, 1]
    d = sync_admission(P2, 2, cost_table({2: 10.0}), pad_rows)
    assert d.verify_lens == [3, 3] and d.reason.startswith("fallback: cost not covered") and d.predicted is None
    d = sync_admission(P2, 2, cost_table({2: 10.0, 4: 12.0}), pad_rows, max_lens=[3, 1])
    assert d.verify_lens == [3, 1]  # fallback full width, within the caps


def test_async_budget_searches_past_cost_cliffs():
    """R-D3b / R-D4: argmax over every prepared bucket, no early stop."""
    cost = cost_table({2: 10.0, 4: 12.0, 6: 30.0, 8: 14.0})  # a jagged cost curve
    assert sync_admission(P2, 2, cost, pad_rows).verify_lens == [2, 0]  # stops at the cliff
    d = budget_from_lagged([np.array(P2)], 2, 2, cost, BUCKETS)
    # G=2: 0.2; G=4: 3.7/12 = 0.308; G=6: 4.6/30 = 0.153; G=8: 4.9/14 = 0.35
    assert d.G == 8 and d.reason == "argmax"
    assert d.predicted == pytest.approx({2: 0.2, 4: 3.7 / 12, 6: 4.6 / 30, 8: 0.35})
    assert allocate_in_budget(torch.tensor(P2), d.G).tolist() == [3, 3]


def test_async_budget_ties_go_to_the_smaller_bucket_and_fallbacks():
    d = budget_from_lagged([np.array([[0.5]])], 1, 1, cost_table({1: 1.0, 4: 1.5, 5: 9.0, 6: 9.0}), BUCKETS)
    assert d.G == 1  # 1/1 == 1.5/1.5
    d = budget_from_lagged([], 2, 2, cost_table({}), BUCKETS, width=3)
    assert d.G == 8 and d.reason.startswith("fallback: no lagged feedback")
    d = budget_from_lagged([np.array(P2)], 2, 2, cost_table({2: 1.0, 4: 1.0}), BUCKETS)
    assert d.G == 8 and d.reason.startswith("fallback: cost not covered")


def test_lagged_rounds_are_scaled_to_the_current_batch():
    lagged = np.array([[0.8, 0.4], [0.6, 0.2]])  # B_r = 2, sorted 0.8 0.6 0.4 0.2
    S = expected_top_sums([lagged], 4, 2)  # S(n) = (4/2) * C(n/2), C interpolated
    np.testing.assert_allclose(S, [0.0, 0.8, 1.6, 2.2, 2.8, 3.2, 3.6, 3.8, 4.0])
    np.testing.assert_allclose(expected_top_sums([lagged], 2, 2), [0.0, 0.8, 1.4, 1.8, 2.0])
    other = np.array([[1.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(expected_top_sums([lagged, other], 2, 2), [0.0, 0.9, 1.7, 2.4, 3.0])
    # B_r = 1 scaled to 2 requests: as if both had paths (0.8, 0.4) -> sorted 0.8 0.8 0.4 0.4
    np.testing.assert_allclose(expected_top_sums([np.array([[0.8, 0.4]])], 2, 2), [0.0, 0.8, 1.6, 2.0, 2.4])
    assert budget_from_lagged([lagged], 4, 4, cost_table({4: 1.0, 8: 1.1, 12: 5.0, 16: 6.0}), BUCKETS).G == 8


def reference_lens(P, n):
    B, w = len(P), len(P[0])
    order = sorted(((b, j) for b in range(B) for j in range(w)), key=lambda c: (-P[c[0]][c[1]], c[1], c[0]))
    lens = [0] * B
    for b, j in order[:n]:
        lens[b] += 1
    return lens


def test_allocate_in_budget_ties_by_position_then_slot():
    P = torch.full((3, 2), 0.5)
    assert allocate_in_budget(P, 3 + 2).tolist() == [1, 1, 0]
    assert allocate_in_budget(P, 3 + 4).tolist() == [2, 1, 1]
    assert allocate_in_budget(P, 3).tolist() == [0, 0, 0]
    assert allocate_in_budget(P, 100).tolist() == [2, 2, 2]
    with pytest.raises(ValueError):
        allocate_in_budget(P, 2)


def test_admitted_sets_are_always_prefixes_and_the_top_ranked():
    """R-D3: the first N ranked candidates are per-request prefixes (P non-increasing + tie rule)."""
    g = torch.Generator().manual_seed(3)
    for _ in range(200):
        B, w = int(torch.randint(1, 6, (1,), generator=g)), int(torch.randint(1, 8, (1,), generator=g))
        scores = (torch.rand(B, w, generator=g) * 4).round() / 4  # many exact ties, zeros included
        P = torch.cumprod(scores, dim=1)
        n = int(torch.randint(0, B * w + 1, (1,), generator=g))
        lens = allocate_in_budget(P, B + n)
        assert lens.tolist() == reference_lens(P.tolist(), n)
        ranked = rank_order(P)
        seen = [0] * B
        for b, j in ranked:
            assert seen[b] == j  # every listed candidate's parent came earlier
            seen[b] += 1
        d = sync_admission(P, pad_requests(B) or 4, lambda bcap, G: 1.0 + 0.01 * G, lambda bc, r: r)
        assert sum(d.verify_lens) <= B * w and all(0 <= x <= w for x in d.verify_lens)


def test_allocate_in_budget_respects_caps():
    P = torch.tensor([[0.9, 0.8, 0.7], [0.5, 0.4, 0.3]])
    assert allocate_in_budget(P, 2 + 4, torch.tensor([1, 3])).tolist() == [1, 3]
    assert allocate_in_budget(P, 2 + 6, torch.tensor([0, 2])).tolist() == [0, 2]


def test_allocate_in_budget_has_no_host_sync():
    """Runs on the meta device, where any .item()/.tolist()/bool() on a tensor raises."""
    P = torch.rand(4, 5).to("meta")
    lens = allocate_in_budget(P, 4 + 7, torch.tensor([5, 5, 2, 0]).to("meta"))
    assert lens.shape == (4,) and lens.dtype == torch.long


def test_unified_buckets():
    """R-F6: first prepared buckets covering B, 2B, 4B, B(w+1)."""
    prepared = [1, 2, 4, 8, 16, 24, 32, 40, 48, 64]
    assert unified_buckets(8, 5, prepared) == (8, 16, 32, 48)
    assert unified_buckets(8, 7, prepared) == (8, 16, 32, 64)
    assert unified_buckets(1, 5, prepared) == (1, 2, 4, 8)
    assert unified_buckets(8, 5, [8, 64]) == (8, 64)
    assert unified_buckets(16, 5, [16, 32]) == (16, 32)  # 4B and B(w+1) not prepared


def test_verify_controller_uses_only_lagged_rounds():
    """R-D4: round n's budget comes from rounds <= n - 2; round n - 1 is invisible."""
    cost = cost_table({2: 10.0, 4: 12.0, 6: 30.0, 8: 14.0})
    ctrl = VerifyController(3, cost, pad_requests, BUCKETS, mode="async", lag=2)
    # nothing visible: the prior (paths 0.5, 0.25, 0.125): G=2 0.2, G=4 3/12, G=6 3.5/30, G=8 3.75/14
    assert ctrl.plan_budget(2, round_id=0) == 8
    assert ctrl.decisions[-1].reason == "argmax (cold start: prior rate 0.5)"
    ctrl.observe([[0.9, 0.8 / 0.9, 0.3 / 0.8], [0.6, 1 / 3, 0.5]], round_id=0)  # paths = P2
    ctrl.observe([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], round_id=1)  # nothing worth verifying
    assert ctrl.plan_budget(2, round_id=1) == 8  # round 0 is not yet visible either
    assert ctrl.plan_budget(2, round_id=2) == 8  # sees round 0 (the cliff example): G = 8
    assert ctrl.decisions[-1].reason == "argmax"
    assert ctrl.plan_budget(2, round_id=3) == 2  # sees round 1: no speculation
    lens = ctrl.allocate(torch.tensor(P2), 4)
    assert lens.tolist() == [2, 0]
    # G = B admits no candidate: the engine skips that round's draft (the plain floor), no G is chosen
    assert ctrl.g_histogram[8] == 3 and 2 not in ctrl.g_histogram


def test_verify_controller_sync_mode():
    cost = cost_table({2: 10.0, 4: 12.0, 6: 16.0, 8: 24.0})
    ctrl = VerifyController(3, cost, pad_requests, BUCKETS, mode="sync")
    assert ctrl.admit(torch.tensor(P2)) == [2, 0]
    assert ctrl.decisions[-1].G == 4 and ctrl.decisions[-1].mode == "sync"


def test_verify_controller_kv_coverage_hook_falls_back_to_full_width():
    """R-F7: uncalibrated KV ranges fall back to full-width admission, in both modes."""
    cost = cost_table({2: 10.0, 4: 12.0, 6: 16.0, 8: 24.0})
    covers = lambda bcap, kv: kv is None or kv <= 4096  # noqa: E731
    ctrl = VerifyController(3, cost, pad_requests, BUCKETS, mode="sync", covers=covers)
    assert ctrl.admit(torch.tensor(P2), kv_len=100) == [2, 0]
    assert ctrl.admit(torch.tensor(P2), kv_len=5000) == [3, 3]
    assert ctrl.decisions[-1].G == 8 and "outside the calibrated coverage" in ctrl.decisions[-1].reason
    ctrl = VerifyController(3, cost, pad_requests, BUCKETS, mode="async", lag=1, covers=covers)
    ctrl.observe(np.full((2, 3), 0.01), round_id=0)
    assert ctrl.plan_budget(2, round_id=1, kv_len=100) == 2
    assert ctrl.plan_budget(2, round_id=2, kv_len=5000) == 8


def test_the_cold_start_budgets_under_the_prior_not_at_full_width():
    """Issue 13: before any lagged round is visible the budget comes from the cost table under the
    stated prior; where the prior says no row pays, the round is planned plain (the floor skips its
    draft) instead of verifying full width. prior_rate=None keeps R-D4's literal full-width start."""
    steep = cost_table({2: 10.0, 4: 16.0, 6: 22.0, 8: 28.0})  # every extra row costs 3 ms
    ctrl = VerifyController(3, steep, pad_requests, BUCKETS, mode="async", lag=2, plain_ms=lambda b, kv: 9.0)
    assert ctrl.plan_budget(2, round_id=0) == 2
    assert ctrl.decisions[-1].reason == "plain (cold start: prior rate 0.5)"
    assert not ctrl.predicts_gain(2, round_id=0)  # the synchronous gate agrees: skip the draft
    sure = VerifyController(3, steep, pad_requests, BUCKETS, mode="async", lag=2, plain_ms=lambda b, kv: 9.0,
                            prior_rate=1.0)
    assert sure.plan_budget(2, round_id=0) == 8  # (2 + 6) / 28 beats 2 / 9
    literal = VerifyController(3, steep, pad_requests, BUCKETS, mode="async", lag=2, prior_rate=None)
    assert literal.plan_budget(2, round_id=0) == 8
    assert literal.decisions[-1].reason.startswith("fallback: no lagged feedback")
    assert literal.predicts_gain(2, round_id=0)
    with pytest.raises(ValueError, match="prior_rate"):
        VerifyController(3, steep, pad_requests, BUCKETS, prior_rate=1.5)
