"""Attention rows do not depend on how many query rows share the call (R-B2, issue 13).

A verify block brings 1 + k rows of one request, plain decode one. With the query heads of each KV
head folded into query rows (models/attention.py), a row's attention output has the same bits
whether it is computed in a block of several rows or alone, as long as the call reads the same
keys (the same longest context in the group). SDPA's `enable_gqa` path, used before, rounded
almost every such row differently. Keys are also read in whole KEY_BLOCKs (masked past a
request's length): SDPA's CPU kernel sums a row's keys in vector chunks plus a tail, so before that
a row decoded alone and the same row inside a block (or beside a longer request) were rounded
differently whenever their key counts straddled a chunk boundary -- at 5 of 27 context lengths for
a verify block's rows and at 25 of 27 beside a longer request, on the bundled model. Query rows
are padded to whole QUERY_BLOCKs as well: on an AMD EPYC VM SDPA rounded a row differently at 1, 2,
3 and >= 4 rows per call, so these tests failed there until then (they passed on the Intel VM).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from adaspec.models.attention import build_layout, ragged_attention

SHAPES = [(9, 3, 64), (4, 2, 16), (4, 4, 8)]  # (heads, kv heads, head dim): bundled model, test model, MHA


def _cache(slots, kvh, max_len, dim, g):
    return (torch.randn(slots, kvh, max_len, dim, generator=g) for _ in range(2))


@pytest.mark.parametrize("heads,kvh,dim", SHAPES)
@pytest.mark.parametrize("ctx", [14, 200, 700])
def test_a_verify_row_has_the_bits_of_the_same_row_alone(heads, kvh, dim, ctx):
    g = torch.Generator().manual_seed(ctx + heads)
    ck, cv = _cache(3, kvh, 1024, dim, g)
    q_len = 5
    start = ctx - q_len  # the block's last row sits at ctx - 1: the group reads keys 0..ctx-1
    q = torch.randn(q_len, heads, dim, generator=g)
    k, v = (torch.randn(q_len, kvh, dim, generator=g) for _ in range(2))
    block = ragged_attention(q, k, v, ck, cv, build_layout([1], [start], [q_len]))
    for i in range(q_len):
        # row i alone, beside a request at ctx - 1 so that the call reads the same ctx keys
        # (and its row is masked to its own position, as inside the block)
        layout = build_layout([1, 2], [start + i, ctx - 1], [1, 1])
        qi = torch.cat([q[i:i + 1], torch.randn(1, heads, dim, generator=g)])
        ki = torch.cat([k[i:i + 1], torch.randn(1, kvh, dim, generator=g)])
        vi = torch.cat([v[i:i + 1], torch.randn(1, kvh, dim, generator=g)])
        ck2, cv2 = ck.clone(), cv.clone()
        alone = ragged_attention(qi, ki, vi, ck2, cv2, layout)
        assert torch.equal(alone[0], block[i]), f"row {i} of the block"
    # the last row as a plain single-request decode step at the same length
    last = ragged_attention(q[-1:], k[-1:], v[-1:], ck.clone(), cv.clone(), build_layout([1], [ctx - 1], [1]))
    assert torch.equal(last[0], block[-1])


@pytest.mark.parametrize("heads,kvh,dim", SHAPES)
def test_folded_attention_computes_grouped_query_attention(heads, kvh, dim):
    """The folded call is the same attention as repeating each KV head for its query heads."""
    g = torch.Generator().manual_seed(7)
    ck, cv = _cache(3, kvh, 64, dim, g)
    layout = build_layout([2, 0], [9, 30], [3, 1])
    q = torch.randn(4, heads, dim, generator=g)
    k, v = (torch.randn(4, kvh, dim, generator=g) for _ in range(2))
    got = ragged_attention(q, k, v, ck, cv, layout)
    rep = heads // kvh
    rows = [(2, 9, q[:3]), (0, 30, q[3:])]
    want = []
    for slot, start, qs in rows:
        n = qs.shape[0]
        keys = ck[slot, :, :start + n].repeat_interleave(rep, dim=0)  # [heads, L, dim]
        vals = cv[slot, :, :start + n].repeat_interleave(rep, dim=0)
        pos = torch.arange(start, start + n)
        allowed = torch.arange(start + n)[None, :] <= pos[:, None]
        out = F.scaled_dot_product_attention(qs.transpose(0, 1), keys, vals, attn_mask=allowed[None])
        want.append(out.transpose(0, 1).reshape(n, heads * dim))
    torch.testing.assert_close(got, torch.cat(want), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("heads,kvh,dim", SHAPES)
def test_rows_keep_their_bits_across_key_chunk_boundaries(heads, kvh, dim):
    """Issue 13 (R-B5): at every context length 17..70, each row of a 4-row verify block equals the
    same row decoded alone at its own length, and a decode row beside a request with 40 more keys
    equals it alone. Exact bits, so seeded sampling cannot tell the round shapes apart."""
    g = torch.Generator().manual_seed(heads * 100 + dim)
    ck, cv = _cache(3, kvh, 256, dim, g)
    for ctx in range(17, 71):
        start = ctx - 4
        q = torch.randn(4, heads, dim, generator=g)
        k, v = (torch.randn(4, kvh, dim, generator=g) for _ in range(2))
        block = ragged_attention(q, k, v, ck.clone(), cv.clone(), build_layout([1], [start], [4]))
        seq_k, seq_v = ck.clone(), cv.clone()
        for i in range(4):  # plain decode: one row at a time, each at its own length
            alone = ragged_attention(q[i:i + 1], k[i:i + 1], v[i:i + 1], seq_k, seq_v, build_layout([1], [start + i], [1]))
            assert torch.equal(alone[0], block[i]), f"ctx {ctx}, row {i}"
        other = torch.randn(1, heads, dim, generator=g), *(torch.randn(1, kvh, dim, generator=g) for _ in range(2))
        beside = ragged_attention(torch.cat([q[:1], other[0]]), torch.cat([k[:1], other[1]]), torch.cat([v[:1], other[2]]),
                                  ck.clone(), cv.clone(), build_layout([1, 2], [start, start + 40], [1, 1]))
        alone = ragged_attention(q[:1], k[:1], v[:1], ck.clone(), cv.clone(), build_layout([1], [start], [1]))
        assert torch.equal(beside[0], alone[0]), f"ctx {ctx}: beside a longer request"


@pytest.mark.parametrize("heads,kvh,dim", SHAPES)
def test_a_row_has_the_same_bits_at_every_row_count(heads, kvh, dim):
    """QUERY_BLOCK: grouped_attention gives a query row the same bits whether 1..70 rows of its
    request share the call (plain decode, MTP and DSpark verify blocks, prefill chunks past SDPA's
    32-row query chunks)."""
    from adaspec.models.attention import grouped_attention, tile_mask

    g = torch.Generator().manual_seed(heads + dim)
    L = 48
    keys, values = (torch.randn(1, kvh, L, dim, generator=g) for _ in range(2))
    q = torch.randn(1, heads, 70, dim, generator=g)
    mask = torch.zeros(1, 1, 70, L)
    alone = grouped_attention(q[:, :, :1], keys, values, tile_mask(mask[:, :, :1], heads // kvh))
    for n in range(2, 71):
        out = grouped_attention(q[:, :, :n], keys, values, tile_mask(mask[:, :, :n], heads // kvh))
        assert torch.equal(out[:, :, :1], alone), f"{n} rows"
