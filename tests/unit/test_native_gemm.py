"""fp16w products at verify-sized row counts in adaspec's kernel (models/native_gemm.py, issue 14;
R-A1, R-B2, R-B5).

The kernel may stand in for FBGEMM's only where it gives FBGEMM's bits: every output of every row
count it serves, on odd shapes too, and a row's output must not depend on how many rows share the
product, whichever kernel ran it. That is what keeps speculative output equal to plain output.
"""

from __future__ import annotations

import pytest
import torch

from adaspec.kernels import build
from adaspec.models import native_gemm
from adaspec.models.linear import Fp16wLinear, fp16w_implementation, pack_module


@pytest.fixture(autouse=True)
def _available():
    if fp16w_implementation() is None:
        pytest.skip("this torch has no FBGEMM fp16-weight GEMM")
    if build.compiler() is None:
        pytest.skip("no C++ compiler on this machine: the native kernels cannot be built")
    reason = native_gemm.unavailable()
    if reason is not None and "AVX" in reason:
        pytest.skip(reason)
    assert reason is None, reason  # a compiler is present: a failed build is a bug


@pytest.fixture
def fbgemm_keeps_rows():
    """The regime where FBGEMM's rows keep their bits whatever M (the AVX-512 CPUs): the kernel must
    then give FBGEMM's bits to serve some row counts. Elsewhere it serves every product (tests at the end)."""
    if not native_gemm.fbgemm_row_independent((64, 64)):
        pytest.skip("FBGEMM's rows depend on the row count on this CPU: adaspec's kernel serves every product")


def _layer(out_features, in_features, seed=0, bias=False):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out_features, in_features, generator=g) * 0.05
    b = torch.randn(out_features, generator=g) if bias else None
    return Fp16wLinear(w, b)


# (out, in): the bundled model's products, a head-sized one, widths that are not multiples of 32; the AVX-512
# path reads panels of 32 columns in pairs from 4 rows on, so odd panel counts too (the last one alone, full or not)
SHAPES = [(960, 576), (576, 1536), (3072, 576), (48, 32), (33, 7), (100, 70), (1, 5), (80, 40), (96, 24), (160, 9)]


EVERY_ROW = range(1, native_gemm.MAX_ROWS + 1)  # every row count the kernel may be measured to serve


@pytest.mark.parametrize("out_features,in_features", SHAPES)
def test_the_kernel_gives_fbgemms_bits_at_every_row_count_it_may_serve(out_features, in_features, fbgemm_keeps_rows):
    layer = _layer(out_features, in_features)
    report = native_gemm.attach(layer, rows=EVERY_ROW)
    assert report == {"attached": 1, "mismatched": [], "reason": None, "rows": list(EVERY_ROW), "speedups": None,
                      "all_rows": 0}
    g = torch.Generator().manual_seed(1)
    for m in list(EVERY_ROW) + [33, 40]:
        x = torch.randn(m, in_features, generator=g) * 3
        ours = layer(x)
        layer.native_gemm, kept = None, layer.native_gemm
        theirs = layer(x)
        layer.native_gemm = kept
        assert torch.equal(ours, theirs), (m, (ours - theirs).abs().max().item())


def test_a_row_has_the_same_bits_whichever_kernel_ran_its_product(fbgemm_keeps_rows):
    layer = _layer(200, 96, bias=True)
    native_gemm.attach(layer, rows=range(4, 33))
    x = torch.randn(40, 96, generator=torch.Generator().manual_seed(2))
    alone = torch.cat([layer(x[i:i + 1]) for i in range(40)])  # one row: FBGEMM
    for m in (2, 4, 5, 8, 12, 13, 17, 32, 33, 40):  # FBGEMM below 4 and above 32, the kernel between
        assert torch.equal(layer(x[:m]), alone[:m]), m


def test_a_strided_input_is_read_in_place():
    layer = _layer(64, 48)
    native_gemm.attach(layer, rows=EVERY_ROW)
    wide = torch.randn(8, 100, generator=torch.Generator().manual_seed(3))
    x = wide[:, 10:58]  # rows 100 apart
    assert torch.equal(layer(x), layer(x.contiguous()))


def test_attach_covers_every_fp16w_layer_of_a_model_once_and_skips_the_rest(tiny_llama_dir, fbgemm_keeps_rows):
    from adaspec.models.loader import load_model

    _, model = load_model(tiny_llama_dir, linear_backend="fp16w", layer_kernels="native")
    layers = [m for m in model.modules() if isinstance(m, Fp16wLinear)]
    report = model.native_gemm
    assert (report["attached"], report["mismatched"], report["reason"]) == (len(layers), [], None)
    # which row counts the kernel serves was measured (the process's first model), and is what every layer uses
    assert set(report["speedups"]) == set(native_gemm.TIMED_ROWS)
    assert report["rows"] == sorted(native_gemm.rows_from_speedups(report["speedups"]))
    assert all(m.native_gemm is not None and m.native_rows == set(report["rows"]) for m in layers)
    assert all(m.weight16 is None for m in layers)  # the float16 copies are released once packed
    assert native_gemm.attach(model)["attached"] == 0  # already attached: nothing done twice
    _, torch_ops = load_model(tiny_llama_dir, linear_backend="fp16w", layer_kernels="torch")
    assert torch_ops.native_gemm is None  # --layer_kernels=torch: FBGEMM for every product
    assert all(m.native_gemm is None and m.weight16 is None for m in torch_ops.modules() if isinstance(m, Fp16wLinear))
    _, fp32 = load_model(tiny_llama_dir, linear_backend="fp32", layer_kernels="native")
    assert fp32.native_gemm is None


def test_a_layer_whose_bits_differ_keeps_fbgemm_and_is_named(monkeypatch, fbgemm_keeps_rows):
    root = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False))
    pack_module(root, "fp16w")
    real = native_gemm.NativeF16w.__call__
    monkeypatch.setattr(native_gemm.NativeF16w, "__call__", lambda self, x: real(self, x) + 1e-6)
    report = native_gemm.attach(root)
    assert report["attached"] == 0 and report["mismatched"] == ["0"]
    assert "differ from FBGEMM" in report["reason"]
    assert root[0].native_gemm is None
    assert "FBGEMM at every row count" in native_gemm.describe(report)


def test_the_environment_switch_keeps_fbgemm(monkeypatch):
    monkeypatch.setenv("ADASPEC_NATIVE_KERNELS", "0")
    layer = _layer(64, 64)
    report = native_gemm.attach(layer)
    assert report["attached"] == 0 and "ADASPEC_NATIVE_KERNELS=0" in report["reason"]
    assert layer.native_gemm is None


def test_the_served_row_counts_follow_the_nearest_timed_count():
    # FBGEMM faster at 1-4 rows, the kernel from 5 rows up, except a noisy tie at 16
    speedups = {1: 0.92, 2: 0.93, 3: 0.96, 4: 0.93, 5: 1.01, 6: 1.06, 8: 1.09, 12: 1.16, 16: 1.015, 24: 1.09, 32: 1.13}
    rows = native_gemm.rows_from_speedups(speedups)
    # 5 is under the margin; 7 follows 6 (nearest), 10 and 14 follow 8 and 12 (ties: the lower), 15-20 follow 16
    assert sorted(rows) == list(range(6, 15)) + list(range(21, 33))
    assert native_gemm.rows_from_speedups({m: 0.9 for m in speedups}) == frozenset()
    assert native_gemm.spans(rows) == "6-14, 21-32"
    report = {"attached": 3, "mismatched": [], "reason": None, "rows": sorted(rows), "speedups": speedups}
    assert "6-14, 21-32 rows in adaspec's kernel" in native_gemm.describe(report)
    report["rows"] = []
    assert "FBGEMM at every row count" in native_gemm.describe(report)


def test_measuring_times_both_kernels_at_every_timed_row_count(fbgemm_keeps_rows):
    layers = [_layer(96, 64, seed=i) for i in range(3)]
    for layer in layers:
        native_gemm.attach(layer, rows=())
    calls = []
    for layer in layers:  # count the products each kernel ran, by row count
        native, fbgemm = layer.native_gemm, layer._fbgemm
        layer.native_gemm = lambda x, f=native: calls.append(("native", x.shape[0])) or f(x)
        layer._fbgemm = lambda x, f=fbgemm: calls.append(("fbgemm", x.shape[0])) or f(x)
    out = native_gemm.measure_rows(layers, repeats=2)
    assert set(out["speedups"]) == set(native_gemm.TIMED_ROWS) and all(v > 0 for v in out["speedups"].values())
    assert out["rows"] == native_gemm.rows_from_speedups(out["speedups"])
    for kind in ("native", "fbgemm"):
        for m in native_gemm.TIMED_ROWS:
            assert calls.count((kind, m)) == 2 * len(layers), (kind, m)


# ---- CPUs whose FBGEMM changes a row's summation with the row count (AVX2): every product in the kernel


@pytest.fixture
def fbgemm_rows_depend(monkeypatch):
    """Such a CPU, on any machine the kernel runs on."""
    monkeypatch.setattr(native_gemm, "fbgemm_row_independent", lambda shape: False)


@pytest.mark.parametrize("out_features,in_features", SHAPES)
def test_where_fbgemms_rows_depend_on_m_the_kernel_serves_every_product(out_features, in_features,
                                                                          fbgemm_rows_depend):
    layer = _layer(out_features, in_features, bias=True)
    report = native_gemm.attach(layer)
    assert (report["attached"], report["all_rows"], report["reason"]) == (0, 1, None)
    assert layer.native_all and "every row count in adaspec's kernel" in native_gemm.describe(report)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(70, in_features, generator=g) * 3
    alone = torch.cat([layer(x[i:i + 1]) for i in range(70)])
    for m in (2, 3, 4, 5, 7, 12, 13, 32, 33, 70):  # decode, verify and prefill sizes: a row keeps its bits
        assert torch.equal(layer(x[:m]), alone[:m]), m
    assert torch.equal(layer(x[:12].view(3, 4, in_features)), alone[:12].view(3, 4, out_features))  # batched 3-D
    assert torch.equal(layer(x[:, :in_features].t().contiguous().t()), alone)  # column-major input: copied, same bits
    w16 = layer.dense_weight().double()
    ref = x.double() @ w16.t() + layer.bias.double()
    assert torch.allclose(alone.double(), ref, rtol=1e-5, atol=1e-4 * in_features ** 0.5)


def test_a_row_independent_fbgemm_is_left_alone(monkeypatch):
    monkeypatch.setattr(native_gemm, "fbgemm_row_independent", lambda shape: True)
    layer = _layer(64, 48)
    assert native_gemm.serve_all_rows(layer) is False
    assert layer.native_gemm is None and not layer.native_all


def test_a_model_on_such_a_cpu_has_rows_independent_of_m_under_fp16w_and_auto(tiny_llama_dir, fbgemm_rows_depend):
    from adaspec.models.loader import load_model

    for backend in ("fp16w", "auto"):
        _, model = load_model(tiny_llama_dir, linear_backend=backend, layer_kernels="native")
        layers = [m for m in model.modules() if isinstance(m, Fp16wLinear)]
        if backend == "auto" and not layers:
            continue  # auto chose another backend on this machine: its own row check applies
        assert layers and all(m.native_all for m in layers)
        assert model.native_gemm["all_rows"] == len(layers) and model.native_gemm["attached"] == 0
        assert model.linear_choice.row_independent["fp16w"] is True  # the row check saw the kernel
