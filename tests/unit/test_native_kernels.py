"""adaspec's native layer kernels (`--layer_kernels`, issue 14; R-A1, R-A2, R-B2, R-B5).

The kernels (adaspec/kernels/*.cpp) must compute what the torch ops compute (attention with rotary
embedding, writing the new keys and values where the SDPA path writes them; RMSNorm with the
residual add; SiLU-and-multiply), and give every row the same bits whatever else shares its forward:
alone, in a verify block, beside other requests, or inside a prefill chunk of any size. Those bits
are what greedy and seeded speculative output equal plain output by.
"""

from __future__ import annotations

import pytest
import torch

from adaspec.kernels import build
from adaspec.models import native_kernels
from adaspec.models.attention import build_layout, ragged_attention
from adaspec.models.rope import apply_rotary


def _kernel_or_skip():
    if build.compiler() is None:
        pytest.skip("no C++ compiler on this machine: the native kernels cannot be built (auto falls back to torch)")
    k = native_kernels.kernels()
    # a compiler is present: a build failure is a bug in the kernels, not a reason to skip
    assert not isinstance(k, str), k


@pytest.fixture(autouse=True)
def _native():
    _kernel_or_skip()


# (heads, kv heads, head dim): the bundled model, the tiny test model, MHA, head sizes 32/80/128
SHAPES = [(9, 3, 64), (4, 2, 16), (4, 4, 32), (10, 2, 80), (8, 2, 128)]


def _reference(q, ck, cv, slots, starts, q_lens, window=None):
    """float64 attention of each row over its request's keys [lo, pos] (after the rows were written)."""
    heads, kvh, dim = q.shape[1], ck.shape[1], q.shape[2]
    out, t = torch.empty(q.shape[0], heads * dim, dtype=torch.float64), 0
    for slot, start, n in zip(slots, starts, q_lens):
        for i in range(n):
            pos = start + i
            lo = 0 if window is None else max(0, pos - window + 1)
            keys = ck[slot, :, lo:pos + 1].double().repeat_interleave(heads // kvh, 0)  # [heads, L, D]
            vals = cv[slot, :, lo:pos + 1].double().repeat_interleave(heads // kvh, 0)
            s = torch.einsum("hd,hld->hl", q[t].double(), keys) / dim ** 0.5
            out[t] = torch.einsum("hl,hld->hd", torch.softmax(s, -1), vals).reshape(-1)
            t += 1
    return out


def _inputs(g, heads, kvh, dim, rows, slots=4, max_len=1024):
    ck, cv = (torch.randn(slots, kvh, max_len, dim, generator=g) for _ in range(2))
    q = torch.randn(rows, heads, dim, generator=g)
    k, v = (torch.randn(rows, kvh, dim, generator=g) for _ in range(2))
    return q, k, v, ck, cv


@pytest.mark.parametrize("heads,kvh,dim", SHAPES)
@pytest.mark.parametrize("window", [None, 40])
def test_the_kernel_computes_attention_and_writes_the_cache_as_sdpa_does(heads, kvh, dim, window):
    g = torch.Generator().manual_seed(heads * dim + (window or 0))
    slots, starts, q_lens = [3, 0, 1], [0, 150, 37], [70, 1, 6]  # a prefill chunk, a decode row, a verify block
    q, k, v, ck, cv = _inputs(g, heads, kvh, dim, sum(q_lens))
    ck_s, cv_s = ck.clone(), cv.clone()
    native = ragged_attention(q, k, v, ck, cv, build_layout(slots, starts, q_lens, sliding_window=window, native=True))
    sdpa = ragged_attention(q, k, v, ck_s, cv_s, build_layout(slots, starts, q_lens, sliding_window=window))
    assert torch.equal(ck, ck_s) and torch.equal(cv, cv_s), "the new keys/values land where SDPA's path puts them"
    want = _reference(q, ck, cv, slots, starts, q_lens, window)
    assert (native.double() - want).abs().max() < 2e-5
    assert (sdpa.double() - want).abs().max() < 2e-5


@pytest.mark.parametrize("heads,kvh,dim", SHAPES[:3])
def test_a_row_has_the_same_bits_alone_in_a_block_beside_others_and_in_any_prefill_chunk(heads, kvh, dim):
    g = torch.Generator().manual_seed(11 + dim)
    n = 45
    q, k, v, ck, cv = _inputs(g, heads, kvh, dim, n)
    start = 300
    # the whole stretch as one prefill chunk
    whole = ragged_attention(q, k, v, ck.clone(), cv.clone(), build_layout([2], [start], [n], native=True))
    # cut into chunks of 1..13 rows, each beside an unrelated request of another length
    for size in (1, 2, 3, 4, 5, 7, 13):
        c_k, c_v = ck.clone(), cv.clone()
        pieces = []
        for a in range(0, n, size):
            b = min(n, a + size)
            extra = torch.randn(3, heads, dim, generator=g), torch.randn(3, kvh, dim, generator=g)
            layout = build_layout([0, 2], [17 * size, start + a], [3, b - a], native=True)
            out = ragged_attention(torch.cat([extra[0], q[a:b]]), torch.cat([extra[1], k[a:b]]),
                                   torch.cat([extra[1], v[a:b]]), c_k, c_v, layout)
            pieces.append(out[3:])
        assert torch.equal(torch.cat(pieces), whole), f"chunks of {size} rows"


def test_rows_do_not_depend_on_slot_order_or_gathered_slots():
    g = torch.Generator().manual_seed(5)
    heads, kvh, dim = 9, 3, 64
    q, k, v, ck, cv = _inputs(g, heads, kvh, dim, 4, slots=8)
    a = ragged_attention(q, k, v, ck.clone(), cv.clone(), build_layout([6, 1, 4, 2], [90, 12, 500, 33], [1] * 4,
                                                                         native=True))
    for i, (slot, pos) in enumerate([(6, 90), (1, 12), (4, 500), (2, 33)]):
        alone = ragged_attention(q[i:i + 1], k[i:i + 1], v[i:i + 1], ck.clone(), cv.clone(),
                                 build_layout([slot], [pos], [1], native=True))
        assert torch.equal(alone[0], a[i])


def test_a_slot_or_position_outside_the_cache_is_an_error_not_a_stray_write():
    g = torch.Generator().manual_seed(9)
    q, k, v, ck, cv = _inputs(g, 9, 3, 64, 1, slots=2, max_len=64)
    before = ck.clone()
    with pytest.raises(RuntimeError, match="code -2"):
        ragged_attention(q, k, v, ck, cv, build_layout([2], [5], [1], native=True))  # slot 2 of 2
    with pytest.raises(RuntimeError, match="code -2"):
        ragged_attention(q, k, v, ck, cv, build_layout([0], [64], [1], native=True))  # position 64 of 64
    assert torch.equal(ck, before)
    with pytest.raises(ValueError, match="float32 K and V caches"):
        ragged_attention(q, k, v, ck, cv[:, :, :48], build_layout([0], [5], [1], native=True))


def _cfg(head_dim=64, hidden=576, ffn=1536):
    from types import SimpleNamespace

    return SimpleNamespace(head_dim=head_dim, hidden_size=hidden, intermediate_size=ffn)


def test_resolve_chooses_and_refuses_with_the_flag_named():
    assert native_kernels.resolve("auto", "cpu", torch.float32, _cfg())[0] == "native"
    assert native_kernels.resolve("torch", "cpu", torch.float32, _cfg())[0] == "torch"
    backend, why = native_kernels.resolve("auto", "cpu", torch.bfloat16, _cfg())
    assert backend == "torch" and "float32" in why
    backend, why = native_kernels.resolve("auto", "cpu", torch.float32, _cfg(head_dim=8))
    assert backend == "torch" and "head size" in why
    with pytest.raises(ValueError, match="--layer_kernels=native cannot run here: .*bfloat16"):
        native_kernels.resolve("native", "cpu", torch.bfloat16, _cfg())
    with pytest.raises(ValueError, match="allowed values are auto, native, torch"):
        native_kernels.resolve("fast", "cpu", torch.float32, _cfg())


def test_the_environment_switch_turns_auto_to_torch_even_after_the_kernels_loaded(monkeypatch):
    assert not isinstance(native_kernels.kernels(), str)
    monkeypatch.setenv("ADASPEC_NATIVE_KERNELS", "0")
    backend, why = native_kernels.resolve("auto", "cpu", torch.float32, _cfg())
    assert backend == "torch" and "ADASPEC_NATIVE_KERNELS=0" in why
    with pytest.raises(ValueError, match="ADASPEC_NATIVE_KERNELS=0"):
        native_kernels.resolve("native", "cpu", torch.float32, _cfg())


def test_without_a_working_compiler_auto_keeps_sdpa_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("ADASPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a "compiler" that fails every build
    monkeypatch.setattr(build, "compiler", lambda: "/bin/false")
    build._load.cache_clear()
    try:
        reason = build.load()
        assert isinstance(reason, str) and "did not build" in reason
        assert not list((tmp_path / "kernels").glob("*.so")), "a failed build leaves no library behind"
    finally:
        build._load.cache_clear()
    monkeypatch.setenv("ADASPEC_NATIVE_KERNELS", "0")
    assert "ADASPEC_NATIVE_KERNELS=0" in build.load()
    build._load.cache_clear()


def test_an_unwritable_cache_directory_is_a_reason_not_a_crash(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("ADASPEC_CACHE_DIR", str(blocker))
    build._load.cache_clear()
    try:
        reason = build.load()
        assert isinstance(reason, str) and "ADASPEC_CACHE_DIR" in reason
    finally:
        build._load.cache_clear()


def test_the_library_is_cached_per_source_and_machine(monkeypatch, tmp_path):
    monkeypatch.setenv("ADASPEC_CACHE_DIR", str(tmp_path))
    build._load.cache_clear()
    try:
        lib = build.load()
        assert not isinstance(lib, str), lib
        built = list((tmp_path / "kernels").glob("layer-*.so"))
        assert len(built) == 1
        mtime = built[0].stat().st_mtime_ns
        build._load.cache_clear()
        assert not isinstance(build.load(), str)
        assert built[0].stat().st_mtime_ns == mtime, "the second load reuses the cached library"
    finally:
        build._load.cache_clear()


@pytest.mark.parametrize("heads,kvh,dim", SHAPES[:3])
def test_rotary_inside_the_kernel_is_models_rope(heads, kvh, dim):
    g = torch.Generator().manual_seed(3 + dim)
    slots, starts, q_lens = [1, 0], [60, 10], [5, 1]
    q, k, v, ck, cv = _inputs(g, heads, kvh, dim, sum(q_lens))
    ang = torch.rand(sum(q_lens), 1, dim // 2, generator=g) * 6
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    lay = build_layout(slots, starts, q_lens, native=True)
    ck_n, cv_n = ck.clone(), cv.clone()
    fused = native_kernels.attend(q, k, v, ck_n, cv_n, lay.native, cos, sin)
    ck_t, cv_t = ck.clone(), cv.clone()
    apart = ragged_attention(apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v, ck_t, cv_t,
                             build_layout(slots, starts, q_lens))
    assert torch.allclose(ck_n, ck_t, atol=1e-6) and torch.equal(cv_n, cv_t)
    assert (fused - apart).abs().max() < 2e-5


@pytest.mark.parametrize("with_add", [False, True])
@pytest.mark.parametrize("hidden", [576, 100])  # 100: a tail past the last whole vector of 16
def test_add_rmsnorm_is_the_residual_add_then_rmsnorm(with_add, hidden):
    g = torch.Generator().manual_seed(1)
    x, a = torch.randn(7, hidden, generator=g) * 3, torch.randn(7, hidden, generator=g)
    w, eps = torch.randn(hidden, generator=g), 1e-5
    s = x + a if with_add else x
    want = w * (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps))
    summed, got = native_kernels.add_rmsnorm(x, a.clone() if with_add else None, w, eps)
    assert torch.equal(summed, s)
    assert (got - want).abs().max() < 1e-5 * want.abs().max()
    # a row's bits do not depend on the rows beside it
    for i in range(7):
        _, alone = native_kernels.add_rmsnorm(x[i:i + 1], a[i:i + 1].clone() if with_add else None, w, eps)
        assert torch.equal(alone[0], got[i])


@pytest.mark.parametrize("ffn", [1536, 1000])  # 1000: a tail past the last whole vector of 16
def test_silu_mul_is_silu_of_the_gate_times_up(ffn):
    g = torch.Generator().manual_seed(2)
    gu = torch.randn(5, 2 * ffn, generator=g) * 8
    gu[0, :4] = torch.tensor([-200.0, 200.0, 0.0, -90.0])  # past exp's range on both sides
    gu[1, ffn - 3:ffn] = torch.tensor([-200.0, 200.0, -90.0])
    got = native_kernels.silu_mul(gu)
    want = torch.nn.functional.silu(gu[:, :ffn]) * gu[:, ffn:]
    assert torch.isfinite(got).all()
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(native_kernels.silu_mul(gu[3:4])[0], got[3])


def test_a_model_gives_the_same_logits_on_both_kernels(tiny_llama_dir):
    """The whole forward (prefill, then decode rows) with --layer_kernels native and torch."""
    from adaspec.models.loader import load_model
    from adaspec.runner.kv_cache import KVCache

    out = {}
    for choice in ("native", "torch"):
        cfg, model = load_model(tiny_llama_dir, layer_kernels=choice)
        assert model.layer_kernels == choice
        kv = KVCache(cfg.num_layers, 2, cfg.num_kv_heads, 64, cfg.head_dim, torch.float32)
        ids = torch.arange(3, 40) % cfg.vocab_size
        native = choice == "native"
        h1, _ = model(ids[:30], build_layout([0, 1], [0, 0], [20, 10], native=native), kv)
        h2, _ = model(ids[30:34], build_layout([1, 0], [10, 20], [1, 3], native=native), kv)
        out[choice] = model.logits(torch.cat([h1, h2]))
    assert (out["native"] - out["torch"]).abs().max() < 1e-4


@pytest.mark.parametrize("choice", ["native", "torch"])
def test_a_layer_keeping_some_rows_writes_every_row_to_the_cache_and_keeps_their_bits(tiny_llama_dir, choice):
    """DecoderLayer(keep=rows), what the MTP draft's deferred refresh runs (issue 13): every row's keys and
    values land in the cache exactly as in the full forward, and the kept rows' outputs have the full
    forward's bits on fp16w products, which give a row the same bits at any row count (on fp32 MKL
    products they agree to rounding only, as everywhere else)."""
    from adaspec.models.loader import load_model

    torch.manual_seed(3)
    for backend in ("fp16w", "fp32"):
        cfg, model = load_model(tiny_llama_dir, linear_backend=backend, layer_kernels=choice)
        layer = model.model.layers[0]
        x = torch.randn(13, cfg.hidden_size)
        shape = (2, cfg.num_kv_heads, 64, cfg.head_dim)
        lay = build_layout([0, 1], [5, 9], [8, 5], native=choice == "native")
        cos, sin = model.rope.cos_sin(lay.row_pos)
        caches, outs = {}, {}
        for name, keep in (("full", None), ("kept", torch.tensor([7, 12]))):
            ck, cv = torch.zeros(shape), torch.zeros(shape)
            with torch.inference_mode():
                outs[name] = layer(x, cos, sin, ck, cv, lay, keep)
            caches[name] = (ck, cv)
        assert outs["kept"].shape == (2, cfg.hidden_size)
        assert all(torch.equal(a, b) for a, b in zip(caches["kept"], caches["full"]))
        assert caches["full"][0][0, :, 5:13].abs().sum() > 0  # the rows really wrote the cache
        from adaspec.models import native_gemm
        from adaspec.models.linear import Fp16wLinear

        fp16w_rows_keep_bits = choice == "native" or all(  # FBGEMM alone keeps them only on some CPUs (AVX-512)
            native_gemm.fbgemm_row_independent((m.out_features, m.in_features))
            for m in layer.modules() if isinstance(m, Fp16wLinear))
        if backend == "fp16w" and fp16w_rows_keep_bits:
            assert torch.equal(outs["kept"], outs["full"][[7, 12]])
        else:
            torch.testing.assert_close(outs["kept"], outs["full"][[7, 12]], rtol=1e-5, atol=1e-5)
