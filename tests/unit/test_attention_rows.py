"""Attention rows do not depend on how many query rows share the call (R-B2, issue 13).

A verify block brings 1 + k rows of one request, plain decode one. With the query heads of each KV
head folded into query rows (models/attention.py), a row's attention output has the same bits
whether it is computed in a block of several rows or alone, as long as the call reads the same
keys (the same longest context in the group). SDPA's `enable_gqa` path, used before, rounded
almost every such row differently. The key count still changes the rounding (~1e-7), which is
why end-to-end exactness is checked on tokens (test_spec_rounds, test_adaptive_losslessness).
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
    # the last row as a plain single-request decode step (no mask at all) at the same length
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
