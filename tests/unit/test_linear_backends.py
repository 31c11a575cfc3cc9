"""Linear backends (issue 14; R-A1, R-A4, R-B2, R-G3): values, row independence, packing, selection, errors.

Row independence is the property behind R-B2 on a backend: a row's output must be bit-for-bit the
same whether it is multiplied alone (plain decode) or with other rows (a verify, a batch). It is
asserted for the backends `auto` may choose as the default because they have it (fp16w) and for
int8; MKL fp32 and oneDNN bf16 do not have it on this CPU, which is why `auto` prefers fp16w
(for fp32 the test only records it, it is not a promise of this machine's BLAS).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from adaspec.config import ConfigError, EngineConfig
from adaspec.models import linear, linear_select
from adaspec.models.linear import PackedLinear, dense_weight, pack_linear, pack_module, row_independent

PACKED = [b for b in ("fp16w", "bf16", "int8") if linear.unavailable_reason(b) is None]
# how far each backend may be from fp32 on unit-scale products of 64..1536 terms (relative to max |y|)
TOLERANCE = {"fp16w": 2e-3, "bf16": 2e-2, "int8": 3e-2}
SHAPES = [(128, 64), (1, 96), (1536, 576), (576, 1536)]  # tiny test model, N = 1, SmolLM2's MLP shapes


def weights(out_f, in_f, seed=0, bias=True):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out_f, in_f, generator=g) * in_f ** -0.5
    return w, (torch.randn(out_f, generator=g) * 0.1 if bias else None)


@pytest.mark.parametrize("backend", PACKED)
@pytest.mark.parametrize("shape", SHAPES)
def test_packed_output_is_close_to_fp32(backend, shape):
    w, b = weights(*shape)
    m = pack_linear(w, b, backend)
    x = torch.randn(2, 3, shape[1])  # leading dims pass through, as in DSpark's [B, w, H] block
    ref = torch.nn.functional.linear(x, w, b)
    y = m(x)
    assert y.shape == ref.shape and y.dtype == torch.float32
    assert (y - ref).abs().max() <= TOLERANCE[backend] * ref.abs().max()
    assert not list(m.parameters())  # inference only: nothing to train


@pytest.mark.parametrize("backend", [b for b in ("fp16w", "int8") if b in PACKED])
@pytest.mark.parametrize("shape", SHAPES)
def test_rows_do_not_depend_on_the_row_count(backend, shape):
    """R-B2 on the backend as the engine runs it: M = 1 and M = 2..16 give the same bits for the same row.
    fp16w on a CPU whose FBGEMM changes a row's summation with M (AVX2): adaspec's kernel runs every product."""
    from adaspec.models import native_gemm

    w, b = weights(*shape, seed=3)
    m = pack_linear(w, b, backend)
    if backend == "fp16w" and not native_gemm.serve_all_rows(m) \
            and not native_gemm.fbgemm_row_independent(tuple(w.shape)):
        pytest.skip(f"FBGEMM's rows depend on M here and adaspec's kernel cannot run ({native_gemm.unavailable()}): "
                    "`auto` does not choose fp16w then")
    assert row_independent(m, shape[1])


def test_fp16w_values_are_the_float16_rounded_weights():
    if "fp16w" not in PACKED:
        pytest.skip("no FBGEMM fp16 GEMM in this torch build")
    w, _ = weights(300, 64)
    m = pack_linear(w, None, "fp16w")
    assert torch.equal(m.dense_weight(), w.half().float())
    with pytest.raises(ValueError):  # not representable: pack_module keeps such a layer in fp32
        pack_linear(w * 1e6, None, "fp16w")


def test_fp16w_fallback_entry_point_gives_the_same_bits(monkeypatch):
    """The non-deprecated FBGEMM op is the fallback if a torch drops torch.fbgemm_linear_fp16_weight."""
    if linear.fp16w_implementation() != "torch.fbgemm_linear_fp16_weight":
        pytest.skip("the deprecated entry point is not present")
    w, b = weights(1536, 576)
    x = torch.randn(5, 576)
    primary = pack_linear(w, b, "fp16w")(x)
    monkeypatch.setattr(linear, "fp16w_implementation", lambda: "torch.ops.quantized.linear_dynamic_fp16")
    fallback = pack_linear(w, b, "fp16w")
    assert fallback.impl == "torch.ops.quantized.linear_dynamic_fp16"
    assert torch.equal(fallback(x), primary)


class _Head(nn.Module):
    """A module multiplying by a weight outside nn.Linear, like DraftVocab."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randn(10, 8))
        self.head = None

    def pack_linears(self, pack):
        self.head = pack(self.w, None)


@pytest.mark.parametrize("backend", PACKED)
def test_pack_module_covers_every_linear_and_hooked_head(backend):
    """Generic: nested, shared and later-added nn.Linear layers and pack_linears hooks are all packed."""
    shared = nn.Linear(8, 8)
    root = nn.Module()
    root.a = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    root.b, root.c = shared, shared
    root.head = _Head()
    root.extra = nn.ModuleList([nn.Linear(8, 4, bias=False)])  # e.g. a layer another change adds to a draft
    x = torch.randn(3, 8)
    ref = root.extra[0](root.c(root.a(x)))
    report = pack_module(root, backend)
    assert not any(isinstance(m, nn.Linear) for m in root.modules())
    assert root.b is root.c  # shared stays shared
    assert report["packed"] == 4 and not report["kept_fp32"]
    assert isinstance(root.head.head, PackedLinear) and root.head.head.backend == backend
    y = root.extra[0](root.c(root.a(x)))
    assert (y - ref).abs().max() <= 10 * TOLERANCE[backend] * ref.abs().max()


def test_pack_module_keeps_unrepresentable_layers_in_fp32():
    if "fp16w" not in PACKED:
        pytest.skip("no FBGEMM fp16 GEMM in this torch build")
    root = nn.Module()
    root.ok, root.huge = nn.Linear(8, 8), nn.Linear(8, 8)
    with torch.no_grad():
        root.huge.weight.mul_(1e6)
    report = pack_module(root, "fp16w")
    assert report["kept_fp32"] == ["huge"] and isinstance(root.huge, nn.Linear)
    assert isinstance(root.ok, PackedLinear)


def test_relayout_gives_a_tied_head_its_own_column_major_copy():
    """A head tied to an embedding (the bundled model's) is relaid out as a copy, so the embedding's rows
    stay contiguous; a second relayout changes nothing (pack_module relays out what a packed backend keeps)."""
    from adaspec.models.linear import relayout_fp32

    root = nn.Module()
    root.emb, root.head = nn.Embedding(12, 8), nn.Linear(8, 12, bias=False)
    root.head.weight = root.emb.weight
    relayout_fp32(root)
    assert root.emb.weight.stride() == (8, 1) and root.head.weight.stride() == (1, 12)
    assert root.head.weight is not root.emb.weight and torch.equal(root.head.weight, root.emb.weight)
    ptr = root.head.weight.data_ptr()
    relayout_fp32(root)
    assert root.head.weight.data_ptr() == ptr and root.emb.weight.stride() == (8, 1)


def test_native_backend_keeps_nn_linear_column_major():
    root = nn.Sequential(nn.Linear(8, 16))
    pack_module(root, "fp32")
    assert isinstance(root[0], nn.Linear) and root[0].weight.stride() == (1, 16)
    assert dense_weight(root[0]) is root[0].weight


def test_auto_measures_and_prefers_row_independent_backends(tiny_llama_dir):
    import time

    from adaspec.models.loader import load_model

    t0 = time.perf_counter()
    cfg, model = load_model(tiny_llama_dir, torch.float32, "cpu", linear_backend="auto", verify_rows=8)
    assert time.perf_counter() - t0 < 10
    choice = model.linear_choice
    assert model.linear_backend == choice.backend and choice.requested == "auto"
    # the selection stops at its 1.5 s budget after two passes; the bound leaves room for a loaded
    # machine (a wall-clock 2 s bound failed once while another job installed packages)
    assert choice.rows == (1, 8) and set(choice.est_ms) >= {"fp32"} and choice.seconds < 5
    assert all(len(ms) == 2 and all(t > 0 for t in ms) for ms in choice.est_ms.values())
    if any(choice.row_independent.values()):
        assert choice.row_independent[choice.backend]
    text = choice.describe()
    assert f"linear backend: {choice.backend} (auto" in text and "M=1 / M=8" in text


def test_auto_falls_back_to_fp32_when_fp16w_is_missing(tiny_llama_dir, monkeypatch):
    from adaspec.models.loader import load_model

    monkeypatch.setattr(linear, "fp16w_implementation", lambda: None)
    monkeypatch.setattr(linear_select, "CANDIDATES", ("fp32", "fp16w"))
    _, model = load_model(tiny_llama_dir, torch.float32, "cpu", linear_backend="auto")
    assert model.linear_backend == "fp32"
    assert "fp16w unavailable" in model.linear_choice.describe()
    with pytest.raises(ConfigError, match="--linear_backend=fp16w cannot run here"):
        load_model(tiny_llama_dir, torch.float32, "cpu", linear_backend="fp16w")


@pytest.mark.parametrize("flags, match", [
    (dict(linear_backend="fp8"), "--linear_backend=fp8: allowed values are auto, fp32, fp16w, bf16, int8"),
    (dict(linear_backend="fp16w", device="cuda"), "--linear_backend=fp16w is a CPU kernel.*auto or fp32"),
    (dict(linear_backend="int8", device="cuda", dtype="bfloat16"), "CPU kernel.*auto or bf16"),
    (dict(linear_backend="fp16w", dtype="bfloat16"), "needs --dtype=float32"),
])
def test_bad_backend_is_refused_at_start_up_naming_the_flag(flags, match):
    with pytest.raises(ConfigError, match=match) as e:
        EngineConfig(**flags).validate()
    assert e.value.param == "--linear_backend"


def test_cuda_accepts_auto_and_the_dtype_backend():
    EngineConfig(device="cuda", linear_backend="auto").validate()
    EngineConfig(device="cuda", dtype="bfloat16", linear_backend="bf16").validate()


# ---- fused q|k|v and gate|up products (issue 14: fewer, larger products per layer) ----------------
FUSING = [b for b in ("fp16w", "int8") if b in PACKED]


@pytest.mark.parametrize("backend", FUSING)
@pytest.mark.parametrize("bias", [False, True])
def test_fused_product_equals_the_separate_products_bit_for_bit(backend, bias):
    """models/linear.fuse: every output column of the stacked product has the bits of its own layer
    (M = 1..16 rows; SmolLM2's q|k|v and gate|up shapes and a tiny odd one)."""
    from adaspec.models.linear import fuse

    for outs, in_f in [((576, 192, 192), 576), ((1536, 1536), 576), ((7, 5, 3), 33)]:
        owner = nn.Module()
        names = tuple(f"p{i}" for i in range(len(outs)))
        for i, (n, out_f) in enumerate(zip(names, outs)):
            w, b = weights(out_f, in_f, seed=10 + i, bias=bias)
            layer = nn.Linear(in_f, out_f, bias=bias)
            with torch.no_grad():
                layer.weight.copy_(w)
                if bias:
                    layer.bias.copy_(b)
            setattr(owner, n, layer)
        separate = [pack_linear(getattr(owner, n).weight, getattr(owner, n).bias, backend) for n in names]
        fused = fuse(owner, names, lambda w, b: pack_linear(w, b, backend))
        assert fused is not None and not any(hasattr(owner, n) for n in names)
        for m in range(1, 17):
            x = torch.randn(m, in_f)
            assert torch.equal(fused(x), torch.cat([s(x) for s in separate], dim=1)), (outs, m)


def test_fuse_leaves_layers_it_cannot_stack():
    from adaspec.models.linear import fuse

    owner = nn.Module()
    owner.a, owner.b = nn.Linear(8, 4), nn.Linear(8, 4, bias=False)  # bias use differs
    assert fuse(owner, ("a", "b"), lambda w, b: pack_linear(w, b, "int8")) is None
    assert isinstance(owner.a, nn.Linear) and isinstance(owner.b, nn.Linear)


def _ragged_logits(model, cfg):
    """Two forwards mixing a chunked prefill, a decode row and a 3-row verify-like block."""
    from adaspec.models.attention import build_layout
    from adaspec.runner.kv_cache import KVCache

    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 100, (40,), generator=g)
    dtype = next(model.parameters()).dtype
    kv = KVCache(cfg.num_layers, 2, cfg.num_kv_heads, 64, cfg.head_dim, dtype)
    h1, _ = model(ids[:20], build_layout([0, 1], [0, 0], [12, 8], "cpu"), kv)
    h2, _ = model(ids[20:24], build_layout([1, 0], [8, 12], [1, 3], "cpu"), kv)
    return torch.cat([model.logits(h1), model.logits(h2)])


@pytest.mark.parametrize("backend", FUSING)
def test_fused_model_computes_what_the_unfused_model_does(backend, tiny_llama_dir, monkeypatch):
    """R-B2 relative to the engine's own target: fusing changes the number of products, no bits."""
    from adaspec.models.loader import load_model

    cfg, fused = load_model(tiny_llama_dir, torch.float32, "cpu", linear_backend=backend)
    attn, mlp = fused.model.layers[0].self_attn, fused.model.layers[0].mlp
    assert isinstance(attn.qkv_proj, PackedLinear) and isinstance(mlp.gate_up_proj, PackedLinear)
    assert not hasattr(attn, "q_proj") and not hasattr(mlp, "up_proj")
    monkeypatch.setattr(linear._CLASSES[backend], "fusable", False)
    _, separate = load_model(tiny_llama_dir, torch.float32, "cpu", linear_backend=backend)
    assert separate.model.layers[0].self_attn.qkv_proj is None
    assert torch.equal(_ragged_logits(fused, cfg), _ragged_logits(separate, cfg))


def test_fp32_and_bf16_never_fuse(tiny_llama_dir):
    """fp32 stays today's model exactly (separate nn.Linear layers); oneDNN bf16 is not known to
    keep a column's bits when stacked, so it keeps separate products too."""
    from adaspec.models.loader import load_model

    for backend in ["fp32"] + (["bf16"] if "bf16" in PACKED else []):
        _, model = load_model(tiny_llama_dir, torch.float32, "cpu", linear_backend=backend)
        layer = model.model.layers[0]
        assert layer.self_attn.qkv_proj is None and layer.mlp.gate_up_proj is None


def test_bfloat16_model_with_its_own_backend_loads(tiny_llama_dir):
    """--dtype=bfloat16 --linear_backend=bf16 (and auto) load: the row-independence check feeds a
    plain bf16 nn.Linear inputs of its own dtype (it was given float32 and raised)."""
    from adaspec.models.loader import load_model

    for backend in ("bf16", "auto"):
        _, model = load_model(tiny_llama_dir, torch.bfloat16, "cpu", linear_backend=backend)
        assert model.linear_backend == "bf16" and next(model.parameters()).dtype == torch.bfloat16

def test_float16_model_loads_and_generates(tiny_llama_dir):
    """Audit (bad inputs): --dtype=float16, a listed value, ended in a KeyError traceback after the
    weights loaded (the row check packed the dtype's own "fp16" kernel, which has no packed class)."""
    from adaspec import LLM
    from adaspec.sampling_params import SamplingParams

    llm = LLM(str(tiny_llama_dir), dtype="float16", max_model_len=64)
    assert next(llm.engine.model.parameters()).dtype == torch.float16
    out = llm.generate("hi", SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))[0]
    assert len(out.token_ids) == 3


@pytest.mark.skipif(not linear._probe_mkldnn_bf16(), reason="no oneDNN bf16 weight packing in this torch build")
@pytest.mark.parametrize("shape", SHAPES)
def test_packed_bf16_computes_the_bfloat16_product(shape):
    """bf16 on CPU reorders its weights once for oneDNN: the values it multiplies by are the
    bfloat16-rounded weights exactly, and its output is F.linear in bfloat16 to the last bit of a
    bfloat16 result, for float32 and bfloat16 inputs."""
    w, _ = weights(*shape, seed=5, bias=False)
    m = pack_linear(w, None, "bf16")
    assert m.packed and torch.equal(m.dense_weight(), w.bfloat16().float())
    x = torch.randn(5, shape[1])
    ref = torch.nn.functional.linear(x.bfloat16(), w.bfloat16()).float()
    one_ulp = ref.abs().clamp_min(2.0 ** -100) * 2.0 ** -7
    assert m(x).dtype == torch.float32 and ((m(x) - ref).abs() <= one_ulp).all()
    assert m(x.bfloat16()).dtype == torch.bfloat16 and torch.equal(m(x.bfloat16()).float(), m(x))


@pytest.mark.skipif(not linear._probe_mkldnn_bf16(), reason="no oneDNN bf16 weight packing in this torch build")
def test_bfloat16_model_packs_its_linears_on_cpu(tiny_llama_dir):
    """A --dtype=bfloat16 CPU model gets the packed products (Bf16Linear) and computes what its
    plain bf16 nn.Linear layers did, within bfloat16 rounding of the logits."""
    from adaspec.models.loader import load_model

    cfg, packed = load_model(tiny_llama_dir, torch.bfloat16, "cpu", linear_backend="bf16")
    layers = [m for m in packed.modules() if isinstance(m, (nn.Linear, PackedLinear))]
    assert layers and all(isinstance(m, linear.Bf16Linear) and m.packed for m in layers)
    _, plain = load_model(tiny_llama_dir, torch.bfloat16, "cpu", linear_backend="bf16")
    for parent in list(plain.modules()):  # undo the packing: plain bf16 nn.Linear as before
        for name, child in list(parent._modules.items()):
            if isinstance(child, linear.Bf16Linear):
                lin = nn.Linear(child.in_features, child.out_features, bias=False, dtype=torch.bfloat16)
                lin.weight.data = child.dense_weight().bfloat16()
                setattr(parent, name, lin)
    a, b = _ragged_logits(packed, cfg), _ragged_logits(plain, cfg)
    assert a.dtype == b.dtype == torch.float32
    assert (a - b).abs().max() <= 0.05 * b.abs().max()


def test_auto_takes_bf16_only_when_it_is_clearly_faster_at_both_row_counts():
    """Issue 14's rule with a margin: bf16 (the least accurate) replaces the fastest other
    row-independent backend only when it is >= 10% faster at one row and at a verify's rows."""
    ri = {"fp32": False, "fp16w": True, "bf16": True}
    assert linear_select.pick({"fp32": [40, 90], "fp16w": [20, 35], "bf16": [19.5, 22]}, ri) == "fp16w"
    assert linear_select.pick({"fp32": [40, 90], "fp16w": [20, 35], "bf16": [17, 22]}, ri) == "bf16"
    assert linear_select.pick({"fp32": [40, 90], "fp16w": [20, 35], "bf16": [17, 34]}, ri) == "fp16w"
    # rows that depend on M never win over rows that do not, however fast
    assert linear_select.pick({"fp32": [5, 6], "fp16w": [20, 35], "bf16": [30, 40]}, ri) == "fp16w"
    assert linear_select.pick({"fp32": [40, 90], "fp16w": [20, 35]}, {"fp32": True, "fp16w": True}) == "fp16w"
