"""Ragged forward and rollback over the position-indexed KV cache (R-A2).

- A forward that carries a different number of new rows per request gives the same logits as
  running each request alone.
- Rolling back rows is a length change only: writing rows, "rejecting" them, then computing other
  rows at the same positions gives the logits of never having written the rejected rows.
"""

from __future__ import annotations

import torch

from adaspec.models.attention import build_layout
from adaspec.models.loader import load_model
from adaspec.runner.kv_cache import KVCache


def _setup(model_dir, slots=4, max_len=64):
    cfg, model = load_model(model_dir, torch.float32, "cpu")
    kv = KVCache(cfg.num_layers, slots, cfg.num_kv_heads, max_len, cfg.head_dim, torch.float32)
    return cfg, model, kv


def _run(model, kv, slots, starts, rows):
    layout = build_layout(slots, starts, [len(r) for r in rows], "cpu", model.config.sliding_window)
    hidden, _ = model(torch.tensor([t for r in rows for t in r]), layout, kv)
    return model.logits(hidden)


def test_ragged_forward_equals_each_request_alone(tiny_llama_dir):
    cfg, model, kv = _setup(tiny_llama_dir)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 100, (n,), generator=g).tolist() for n in (9, 4, 13)]
    # prefill all three together in slots 3, 0, 2 (not consecutive, not sorted)
    slots = [3, 0, 2]
    together = _run(model, kv, slots, [0, 0, 0], prompts)
    # then a ragged verify-like step: request 0 brings 1 row, request 1 brings 4, request 2 brings 2
    new = [[5], [6, 7, 8, 9], [10, 11]]
    step = _run(model, kv, slots, [len(p) for p in prompts], new)

    offsets = [0, 9, 13, 26]
    step_offsets = [0, 1, 5, 7]
    for b, p in enumerate(prompts):
        _, model_alone, kv_alone = _setup(tiny_llama_dir, slots=1)
        alone = _run(model_alone, kv_alone, [0], [0], [p + new[b]])
        torch.testing.assert_close(together[offsets[b]:offsets[b + 1]], alone[: len(p)], atol=1e-5, rtol=0)
        torch.testing.assert_close(step[step_offsets[b]:step_offsets[b + 1]], alone[len(p):], atol=1e-5, rtol=0)


def test_rollback_is_a_length_change(tiny_llama_dir):
    cfg, model, kv = _setup(tiny_llama_dir, slots=2)
    prompt = list(range(10, 22))
    _run(model, kv, [1], [0], [prompt])
    # write 4 speculative rows at positions 12..15, then reject the last 3 (keep only position 12)
    _run(model, kv, [1], [12], [[40, 41, 42, 43]])
    after_rollback = _run(model, kv, [1], [13], [[50, 51]])  # overwrite positions 13, 14

    _, model2, kv2 = _setup(tiny_llama_dir, slots=2)
    clean = _run(model2, kv2, [1], [0], [prompt + [40, 50, 51]])
    torch.testing.assert_close(after_rollback, clean[13:], atol=1e-5, rtol=0)


def test_layout_rejects_bad_shapes():
    import pytest

    with pytest.raises(ValueError):
        build_layout([0, 1], [0], [1, 1])
    with pytest.raises(ValueError):
        build_layout([0], [0], [0])


def test_additive_mask_gives_the_bits_of_the_bool_mask():
    """Issue 14: each group's mask is turned into SDPA's additive float mask once per forward (not
    in every layer); attention must come out bit for bit as with the bool mask, in every dtype."""
    import torch.nn.functional as F

    from adaspec.models.attention import ragged_attention

    g = torch.Generator().manual_seed(3)
    layout = build_layout([2, 0, 1], [7, 3, 5], [1, 4, 2], "cpu", sliding_window=6)
    T = sum((1, 4, 2))
    for dtype in (torch.float32, torch.bfloat16):
        q = torch.randn(T, 4, 8, generator=g).to(dtype)
        k, v = (torch.randn(T, 2, 8, generator=g).to(dtype) for _ in range(2))
        ck, cv = (torch.randn(3, 2, 16, 8, generator=g).to(dtype) for _ in range(2))
        got = ragged_attention(q, k, v, ck, cv, layout)
        assert all(any(d == dtype for d, _ in grp.additive) for grp in layout.groups)
        real = F.scaled_dot_product_attention
        try:  # the same call with the bool mask, as before
            F.scaled_dot_product_attention = lambda *a, attn_mask=None, **kw: real(
                *a, attn_mask=None if attn_mask is None else attn_mask.isfinite(), **kw)
            want = ragged_attention(q, k, v, ck, cv, layout)
        finally:
            F.scaled_dot_product_attention = real
        assert torch.equal(got, want)
