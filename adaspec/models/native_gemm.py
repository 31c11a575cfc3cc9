"""fp16w products at 4-32 rows in adaspec's own kernel (adaspec/kernels/gemm.cpp; issue 14).

FBGEMM's fp16-weight kernel, behind `--linear_backend=fp16w`, runs at ~100 GFLOPS on this core from
about 32 rows up and streams the weights at one row as fast as the memory allows, but at the 4-16
rows of batched decode and of a verify it reaches 70-85 GFLOPS (BENCHMARKS.md, "fp16w products at
verify-sized row counts"). gemm.cpp computes the same thing (every output element one float32 FMA
chain over the inputs in order, from the same float16-rounded weights), with a prefetch that keeps
the weights streaming, at ~94 GFLOPS at 8 rows.

So the two kernels are interchangeable only if they give the same bits, which `attach` checks on
this machine for every layer before it uses gemm.cpp for it: random rows at 4, 9 and 32 rows, every
output compared bit for bit with FBGEMM's. Where that holds, a product of ROWS rows runs in
gemm.cpp and every other size in FBGEMM, and which kernel ran is invisible in the outputs (the
lossless tests run on both sizes). Where it does not hold (another CPU, another FBGEMM), or the
kernels cannot run (no AVX-512 with F16C, `ADASPEC_NATIVE_KERNELS=0`, `--layer_kernels=torch`),
FBGEMM does every product, as before. The packed copy costs the weights' float16 bytes a second
time (270 MB for the bundled model).
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import torch

from ..kernels import build

ROWS = range(4, 33)  # measured faster than FBGEMM here (BENCHMARKS.md); FBGEMM below and above
PROBE_ROWS = (4, 9, 32)  # the kernel's few-row path, a 12-row tile with a remainder, the largest size used

_P, _I64 = ctypes.c_void_p, ctypes.c_int64


@lru_cache(maxsize=1)
def _functions():
    """(pack, gemm) ctypes functions, or a one-line reason why there are none."""
    lib = build.load()
    if isinstance(lib, str):
        return lib
    if not lib.adaspec_gemm_f16w_available():
        return "the kernel needs AVX-512 with F16C, which this CPU (or compiler) lacks"
    pack, gemm = lib.adaspec_pack_f16w, lib.adaspec_gemm_f16w
    pack.argtypes, pack.restype = [_P, _I64, _I64, _P], ctypes.c_int
    gemm.argtypes, gemm.restype = [_P, _I64, _I64, _I64, _P, _I64, _P, _I64], ctypes.c_int
    return pack, gemm


class NativeF16w:
    """One weight packed for gemm.cpp; calling it on x [M, K] (float32, unit column stride) gives [M, N]."""

    def __init__(self, weight: torch.Tensor, gemm, pack):
        self.out_features, self.in_features = weight.shape
        w = weight.detach().float().contiguous()
        panels = (self.out_features + 31) // 32
        self.packed = torch.empty(panels * self.in_features * 32, dtype=torch.int16)
        if pack(w.data_ptr(), self.out_features, self.in_features, self.packed.data_ptr()) != 0:
            raise RuntimeError("packing a weight for gemm.cpp failed")
        self._gemm = gemm

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = x.new_empty(x.shape[0], self.out_features)
        rc = self._gemm(x.data_ptr(), x.shape[0], self.in_features, x.stride(0), self.packed.data_ptr(),
                        self.out_features, y.data_ptr(), self.out_features)
        if rc != 0:
            raise RuntimeError(f"native fp16w product failed with code {rc}")
        return y


def unavailable() -> str | None:
    """Why gemm.cpp cannot run here (None: it can)."""
    f = build.disabled() or _functions()
    return f if isinstance(f, str) else None


def attach(root: torch.nn.Module, seed: int = 0) -> dict:
    """Give every fp16w layer under `root` gemm.cpp for ROWS rows where it matches FBGEMM bit for bit.

    Returns {"attached": n, "mismatched": [names], "reason": why none (or None)}."""
    from .linear import Fp16wLinear

    reason = unavailable()
    report = {"attached": 0, "mismatched": [], "reason": reason}
    if reason is not None:
        return report
    pack, gemm = _functions()
    g = torch.Generator().manual_seed(seed)
    for name, module in root.named_modules():
        if not isinstance(module, Fp16wLinear) or module.native_gemm is not None:
            continue
        weights = module.dense_weight() if module.weight16 is None else module.weight16.float()
        native = NativeF16w(weights, gemm, pack)
        xs = [torch.randn(m, module.in_features, generator=g) for m in PROBE_ROWS]
        if all(torch.equal(native(x), module._product(x)) for x in xs):
            module.native_gemm = native
            report["attached"] += 1
        else:
            report["mismatched"].append(name)
    if report["mismatched"] and not report["attached"]:
        report["reason"] = "its products differ from FBGEMM's in the last bits on this machine"
    return report


def attach_for(root: torch.nn.Module, linear_backend: str, layer_kernels: str) -> dict | None:
    """`attach` when the model runs fp16w linears with --layer_kernels resolved to native (the
    switch for all of adaspec's C++ kernels), else None. Either way the layers' float16 copies
    (Fp16wLinear.weight16) are released afterwards."""
    from .linear import Fp16wLinear

    report = attach(root) if linear_backend == "fp16w" and layer_kernels == "native" else None
    for module in root.modules():
        if isinstance(module, Fp16wLinear):
            module.weight16 = None
    return report


def describe(report: dict) -> str:
    """One start-up line's worth: what `attach` did."""
    if report["reason"] is not None:
        return f"fp16w products in FBGEMM at every row count ({report['reason']})"
    said = f"fp16w products of {ROWS.start}-{ROWS.stop - 1} rows in adaspec's kernel (bit-identical to FBGEMM, " \
           f"checked per layer: {report['attached']} layers)"
    if report["mismatched"]:
        said += f"; {len(report['mismatched'])} layers differ and keep FBGEMM"
    return said
