"""The Suffix draft and the MTP+Suffix hybrid on hand-built contexts (issue 10).

- proposals: the continuation of the longest earlier n-gram, self-overlapping copies, no match =
  nothing proposed (length 0, score 0), only committed tokens enter, rewinds, gaps refused;
- scores: the stated prior, updates from completed rounds, the estimator's lag (1, and 2 with
  schedule overlap), feature cells;
- global cache: finished outputs are matched, the oldest evicted;
- hybrid: the source choice per request, MTP refresh-only rounds, MTP's proposals unchanged by
  rounds the Suffix draft won.
"""

from __future__ import annotations

import pytest
import torch

from adaspec.drafts.base import DraftBatch, DraftOutput
from adaspec.drafts.hybrid import MTPSuffixDrafter
from adaspec.drafts.suffix import SuffixDrafter
from adaspec.drafts.suffix_index import GlobalCache, SuffixIndex
from adaspec.drafts.suffix_scores import PRIOR_BY_LENGTH, PRIOR_STRENGTH, SuffixScores


def batch(slots, starts, tokens, k, round_id=None, features=4):
    """A DraftBatch whose entries carry `tokens` (per request t_p..t_{p+len})."""
    lens = [len(t) - 1 for t in tokens]
    nxt = [x for t in tokens for x in t[1:]]
    return DraftBatch(list(slots), list(starts), lens, torch.zeros(len(nxt), features), torch.tensor(nxt), k,
                      tokens_host=[list(t) for t in tokens], round_id=round_id)


def drafter(slots=2, **kw) -> SuffixDrafter:
    d = SuffixDrafter(**kw)
    d.allocate(slots, 256)
    return d


# ---- index ------------------------------------------------------------------------------------------
def test_index_finds_longest_earlier_match_and_copies_past_the_end():
    idx = SuffixIndex(8)
    idx.extend([5, 1, 2, 3, 9, 1, 2, 3])
    n, freq, c = idx.longest(2)
    assert (n, freq, c) == (3, 1, 4)  # "1 2 3" occurred once before, followed by position 4 (token 9)
    assert idx.continuation(c, 4) == [9, 1, 2, 3]
    rep = SuffixIndex(8)
    rep.extend([7, 8, 7, 8])
    n, freq, c = rep.longest(2)
    assert rep.continuation(c, 5) == [7, 8, 7, 8, 7]  # self-overlapping copy keeps the period
    none = SuffixIndex(8)
    none.extend([1, 2, 3, 4])
    assert none.longest(2) is None


def test_index_counts_occurrences_and_keeps_the_most_recent():
    idx = SuffixIndex(4)
    idx.extend([1, 2, 10, 1, 2, 11, 1, 2, 12, 1, 2])
    n, freq, c = idx.longest(2)
    assert n == 2 and freq == 3  # "12 1 2" is new; "1 2" occurred three times before (with a continuation)
    assert idx.tokens[c] == 12  # the most recent continuation


def test_index_rewind_never_proposes_tokens_that_are_gone():
    idx = SuffixIndex(8)
    idx.extend([1, 2, 3, 4, 1, 2])
    assert idx.continuation(idx.longest(2)[2], 2) == [3, 4]
    idx.truncate(3)  # [1, 2, 3]
    idx.extend([5, 1, 2])
    n, _, c = idx.longest(2)
    assert idx.continuation(c, 2) == [3, 5]


# ---- proposals ---------------------------------------------------------------------------------------
def test_proposals_and_no_match_on_hand_built_contexts():
    d = drafter()
    out = d.draft(batch([0, 1], [0, 0], [[4, 10, 11, 12, 13, 10, 11], [4, 20, 21, 22, 23]], 3))
    assert isinstance(out, DraftOutput)
    assert out.tokens[0].tolist() == [12, 13, 10] and out.lengths[0] == 3
    assert out.lengths[1] == 0 and out.scores[1].tolist() == [0.0, 0.0, 0.0]  # no match: nothing proposed
    assert out.tokens[1].tolist() == [23, 23, 23]  # filler: a valid id, never verified in a fixed plan
    assert all(0 < s < 1 for s in out.scores[0].tolist())
    # the next round continues where the entries stand: t_p (held already) + the new committed tokens
    out = d.draft(batch([0, 1], [6, 4], [[11, 12, 99], [23, 20, 21]], 2))
    assert out.lengths[0] == 0  # "12 99" never occurred: the rejected draft 13 never entered the index
    assert out.tokens[1].tolist() == [22, 23] and out.lengths[1] == 2
    assert d.slots[0].tokens == [4, 10, 11, 12, 13, 10, 11, 12, 99]


def test_refresh_refuses_a_gap_and_a_new_request_resets_the_slot():
    d = drafter()
    d.draft(batch([0], [0], [[1, 2, 3, 1, 2]], 2))
    with pytest.raises(RuntimeError, match="without gaps"):
        d.draft(batch([0], [9], [[1, 2]], 2))
    d.draft(batch([0], [0], [[7, 8]], 2))  # slot reused by a new request
    assert d.slots[0].tokens == [7, 8] and d.prompt_len[0] == 1


def test_tokens_host_is_required():
    d = drafter()
    b = batch([0], [0], [[1, 2, 3]], 1)
    b.tokens_host = None
    with pytest.raises(RuntimeError, match="tokens_host"):
        d.draft(b)


def test_copy_slot_copies_committed_positions():
    d = drafter()
    d.draft(batch([0], [0], [[1, 2, 3, 4, 1, 2, 3]], 2))
    assert d.copy_slot(0, 1, 5)  # entries of positions 0..4: tokens t_0..t_5
    assert d.slots[1].tokens == [1, 2, 3, 4, 1, 2]
    out = d.draft(batch([1], [5], [[2, 3]], 2))
    assert out.tokens[0].tolist() == [4, 1]


def test_global_cache_matches_finished_outputs_and_evicts_the_oldest():
    d = drafter(slots=2, global_cache=1)
    d.draft(batch([0], [0], [[1, 50]], 2))  # the first call: prompt [1] and the first output token 50
    d.draft(batch([0], [1], [[50, 51, 52, 53, 54]], 2))
    d.release_slot(0)
    assert d.global_cache.outputs[0] == [50, 51, 52, 53, 54]  # the output only, not the prompt
    out = d.draft(batch([1], [0], [[2, 3, 51, 52]], 3))
    assert out.tokens[0, :2].tolist() == [53, 54] and out.lengths[0] == 2  # copied up to the output's end
    d.draft(batch([0], [0], [[1, 60]], 1))
    d.draft(batch([0], [1], [[60, 61, 62]], 1))
    d.release_slot(0)  # capacity 1: the first output is evicted
    assert d.global_cache.longest([51, 52]) is None and d.global_cache.longest([60, 61]) is not None
    g = GlobalCache(0)
    g.add([1, 2, 3])
    assert len(g) == 0


# ---- scores and their lag -------------------------------------------------------------------------------
def test_scores_start_from_the_stated_prior_and_grow_with_match_length():
    est = SuffixScores()
    assert est.scores(2, 1, 3) == pytest.approx([PRIOR_BY_LENGTH[0]] * 3)
    assert est.scores(8, 5, 1) == pytest.approx([PRIOR_BY_LENGTH[-1]])
    assert est.scores(3, 1, 1)[0] < est.scores(6, 1, 1)[0]


def test_scores_learn_from_completed_rounds_only_with_lag_one():
    est = SuffixScores(lag=1)
    est.push(5, [(3, 1, 4, 0)] * 10)  # round 5: ten proposals, all rejected at position 1
    est.release(5)  # round 5 itself cannot see its own result
    assert est.scores(3, 1, 1)[0] == pytest.approx(PRIOR_BY_LENGTH[1])
    est.release(6)
    expected = (0 + PRIOR_STRENGTH * PRIOR_BY_LENGTH[1]) / (10 + PRIOR_STRENGTH)
    assert est.scores(3, 1, 2) == pytest.approx([expected, PRIOR_BY_LENGTH[1]])  # position 2 was never reached
    assert est.scores(2, 1, 1)[0] == pytest.approx(PRIOR_BY_LENGTH[0])  # other cells untouched


def test_drafter_score_lag_two_under_schedule_overlap():
    d = drafter(slots=1)
    d.set_lag(2)
    ctx = [4, 10, 11, 12, 13, 10, 11]
    first = d.draft(batch([0], [0], [ctx], 2, round_id=1)).scores[0].tolist()
    assert first == pytest.approx([PRIOR_BY_LENGTH[0]] * 2)  # "10 11" seen once: the stated prior
    d.observe(1, [2], [2])  # both accepted
    # round 2 is planned while round 1 runs: it must not see round 1's result
    d.draft(batch([0], [6], [[11, 12, 13]], 2, round_id=2))
    assert d.estimator.rounds_applied == 0 and d.estimator.reached.sum() == 0
    d.observe(2, [0], [0])
    d.draft(batch([0], [8], [[13, 10, 11]], 2, round_id=3))
    assert d.estimator.rounds_applied == 1  # round 1 only
    assert d.estimator.accepted.sum() == 2 and d.estimator.reached.sum() == 2


def test_unverified_positions_teach_nothing():
    est = SuffixScores(lag=1)
    est.push(1, [(2, 1, 2, 1), (2, 1, 0, 0)])  # verified 2, accepted 1; a draft that verified nothing
    est.release(2)
    a, f = est.cell(2, 1)
    assert est.reached[a, f, :3].tolist() == [1, 1, 0] and est.accepted[a, f, :3].tolist() == [1, 0, 0]


# ---- hybrid ---------------------------------------------------------------------------------------------
class StubMTP:
    """Proposes token 7 everywhere with score `score`; records the num_steps of every call."""

    kind, capture_layers, max_steps = "mtp", (), 16

    def __init__(self, score=0.9):
        self.score, self.calls = score, []

    def allocate(self, num_slots, max_len):
        pass

    def draft(self, b):
        self.calls.append(b.num_steps)
        B = len(b.slots)
        return DraftOutput(torch.full((B, b.num_steps), 7), torch.full((B, b.num_steps), self.score))


def test_hybrid_chooses_suffix_where_a_match_exists_else_mtp():
    mtp = StubMTP()
    h = MTPSuffixDrafter(mtp)
    h.allocate(2, 128)
    ctx_match = [4] + [10, 11, 12, 13, 14, 15, 16, 17] * 2
    out = h.draft(batch([0, 1], [0, 0], [ctx_match, [4, 20, 21, 22]], 3, round_id=1))
    assert out.tokens[0].tolist() == [10, 11, 12] and out.lengths[0] == 3  # 8-gram match: Suffix
    # no match: MTP, at the depth with the most predicted tokens per unit cost (prior 0.5^j: depth 1)
    assert out.tokens[1].tolist() == [7, 7, 7] and out.lengths[1] == 1 and out.scores[1].tolist()[1:] == [0, 0]
    assert mtp.calls == [1]
    # every request has a good match: MTP only refreshes its context (num_steps 0)
    h.draft(batch([0], [len(ctx_match) - 1], [[17, 10, 11]], 3, round_id=2))
    assert mtp.calls[-1] == 0 and h.mtp_skipped == 1


def test_hybrid_learns_that_mtp_is_better_from_lagged_feedback():
    h = MTPSuffixDrafter(StubMTP())
    h.allocate(2, 128)
    ctx = [4, 10, 11, 30, 10, 11]  # a 2-gram match seen once (prior 0.40) for slot 0, none for slot 1
    out = h.draft(batch([0, 1], [0, 0], [ctx, [4, 20, 21, 22]], 3, round_id=1))
    assert out.tokens[0].tolist() == [30, 10, 11]  # on the priors the Suffix draft wins
    h.observe(1, [3, 3], [0, 3])  # the Suffix proposal was rejected at once, MTP's accepted in full
    # round 2: new requests in both slots with the same match features; round 1 is visible (lag 1)
    out = h.draft(batch([0, 1], [0, 0], [[5, 12, 13, 31, 12, 13], [5, 23, 24]], 3, round_id=2))
    assert out.tokens[0].tolist() == [7, 7, 7]  # MTP now predicts more tokens per unit cost
    assert out.lengths == [3, 3]  # and, accepted in full, it drafts the whole width
    assert h.window.has_data and h.suffix.estimator.rounds_applied == 1


def test_hybrid_full_width_for_adaptive_verify():
    mtp = StubMTP()
    h = MTPSuffixDrafter(mtp, mtp_full_width=True)
    h.allocate(1, 64)
    out = h.draft(batch([0], [0], [[4, 20, 21, 22]], 5, round_id=1))
    assert mtp.calls == [5] and out.lengths == [5]


def test_hybrid_keeps_mtp_context_exact_whichever_source_proposed(tiny_llama_dir):
    """MTP proposals inside the hybrid equal a standalone MTP's on the same entries, although the
    hybrid's MTP ran refresh-only in rounds the Suffix draft won."""
    from adaspec.drafts.factory import build_draft
    from adaspec.models.loader import load_model

    cfg, model = load_model(tiny_llama_dir, torch.float32, "cpu")

    import copy

    d2t = torch.randperm(cfg.vocab_size, generator=torch.Generator().manual_seed(0))[:96]
    alone = build_draft("mtp", cfg, d2t).init_from_target(model).eval().requires_grad_(False)
    alone.allocate(1, 128)
    h = MTPSuffixDrafter(copy.deepcopy(alone))  # the same weights (init_from_target draws random numbers)
    h.suffix.allocate(1, 128)
    g = torch.Generator().manual_seed(3)
    seq = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7, 8, 9, 10, 11, 12, 40, 41, 42, 43, 44, 45]
    start, chosen = 0, []
    for r, end in enumerate([9, 12, 14, 17, 19, 21]):
        toks = seq[start:end + 1]
        b = batch([0], [start], [toks], 3, round_id=r + 1, features=cfg.hidden_size)
        b.hidden = torch.randn(len(toks) - 1, cfg.hidden_size, generator=g)
        ref = alone.draft(b)
        out = h.draft(b)
        if not h._sources[r + 1][0]:  # MTP proposed (its first `depth` tokens: a greedy chain, any k)
            j = out.lengths[0]
            assert out.tokens[:, :j].tolist() == ref.tokens[:, :j].tolist()
            assert torch.equal(out.scores[:, :j], ref.scores[:, :j])
        chosen.append(h._sources[r + 1][0])
        start = end
    assert any(chosen) and not all(chosen)  # both sources won some rounds
