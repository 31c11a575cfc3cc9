"""fp16w products of up to 32 rows in adaspec's own kernel where it is faster (adaspec/kernels/gemm.cpp; issue 14).

FBGEMM's fp16-weight kernel, behind `--linear_backend=fp16w`, runs at ~100 GFLOPS on this core from
about 32 rows up and streams the weights at one row as fast as the memory allows, but at the 4-16
rows of batched decode and of a verify it reaches 70-85 GFLOPS (BENCHMARKS.md, "fp16w products at
verify-sized row counts"). gemm.cpp computes the same thing (every output element one float32 FMA
chain over the inputs in order, from the same float16-rounded weights), with a prefetch that keeps
the weights streaming, at ~94 GFLOPS at 8 rows.

So the two kernels are interchangeable only if they give the same bits, which `attach` checks on
this machine for every layer before it uses gemm.cpp for it: random rows at 2, 4, 9 and 32 rows,
every output compared bit for bit with FBGEMM's. Where that holds, which kernel runs a product is
invisible in the outputs (the lossless tests run on both), so the choice is a matter of speed only,
and speed is measured, not assumed: which row counts up to 32 gemm.cpp serves is decided once per
process by timing both kernels on the model's own weights (`measure_rows`, ~2 s for the bundled model). It differs
between machines: gemm.cpp won at 4-32 rows on a Zen 4 VM; on a Zen 5 VM it won from 5-8 rows and
tied at 1-4 (BENCHMARKS.md); since stop 58's prefetch into L2 (kernels/gemm_avx512.cpp) a whole forward runs 2-32
rows faster in it on the Zen 4 VM (this measurement reads 1.01-1.23x at 2 rows from process to process), and 1 row
ties. Every other size runs in FBGEMM. Where the bits differ (another CPU,
another FBGEMM), or the kernels cannot run (no AVX-512 with F16C, `ADASPEC_NATIVE_KERNELS=0`, `--layer_kernels=torch`),
FBGEMM does every product, as before. The packed copy costs the weights' float16 bytes a second
time (270 MB for the bundled model).

CPUs with AVX2 but no AVX-512 (an AMD EPYC VM, 2026-12-05): there FBGEMM's fp16-weight kernel changes
a row's summation with the row count (`fbgemm_row_independent`, checked per weight shape on random
weights), so a verify row would not equal a decode row, and `auto` fell back to bf16, the only
row-independent candidate and the slowest (13.9 tok/s against FBGEMM fp16w's 27.5 at batch 1).
gemm.cpp has an AVX2 path with the same packed layout and the same per-element FMA chain, and
`serve_all_rows` gives it *every* product of such a layer (any row count, prefill included): rows
are then independent of M by construction, without FBGEMM's bits. It runs a decode row ~1.15x
FBGEMM's speed; at 4+ rows it works in chunks of k so that the weights keep streaming while the
rows compute (4 rows cost ~1.15x one row with the weights coming from memory; BENCHMARKS.md, "fp16w
on AVX2" and stop 38); `auto` times it as the fp16w candidate (linear_select passes the resolved
--layer_kernels).
"""

from __future__ import annotations

import ctypes
import statistics
import time
from functools import lru_cache

import torch

from ..kernels import build

MAX_ROWS = 32  # the largest product gemm.cpp may serve (FBGEMM was 6-10% faster from 128 rows up)
PROBE_ROWS = (2, 4, 9, 32)  # fewer rows than a tile (twice), a 12-row tile with a remainder, the largest size
# row counts timed by measure_rows; a count between them follows the nearest one timed (ties: the lower)
TIMED_ROWS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32)
# gemm.cpp serves a row count only where it was measured at least this much faster than FBGEMM: the
# load-time timing scatters by a few percent between runs on these VMs, and at 1-4 rows, where both
# stream the weights at about the memory's speed, it read 0.96-1.08 while the engine ran 2.5% slower
# with gemm.cpp at 2 rows (BENCHMARKS.md, "fp16w products in adaspec's kernel at 1-4 rows")
MARGIN = 1.05
# weights timed, in model order: the whole of a small model (the bundled one has 134M), so that they stream from memory
# as in a forward. A sample of twice a 32 MiB L3 ran partly from cache and misjudged 2-3 rows (stop 58: 0.93-1.02x
# there against 1.06-1.10x over the whole model, which the forward's times confirmed)
SAMPLE_PARAMS = 160_000_000
REPEATS = 3

_measured: dict = {}  # the process's measurement (a property of the machine), made on the first model attached

_P, _I64 = ctypes.c_void_p, ctypes.c_int64


@lru_cache(maxsize=1)
def _functions():
    """(pack, gemm) ctypes functions, or a one-line reason why there are none."""
    lib = build.load()
    if isinstance(lib, str):
        return lib
    if not lib.adaspec_gemm_f16w_available():
        failed = build.native_build_error()
        if failed is not None:  # the CPU may well have them: say what the compiler said
            return f"the kernel's AVX-512 / AVX2 paths need the -march=native build, which failed: {failed}"
        return "the kernel needs AVX-512 or AVX2 with F16C and FMA, which this CPU (or compiler) lacks"
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


@lru_cache(maxsize=None)
def fbgemm_row_independent(shape: tuple[int, int]) -> bool:
    """Whether FBGEMM's fp16-weight product keeps a row's bits whatever the row count, for an
    [out, in] weight of `shape` on this machine (random weights: a model's own can hide it). It does on
    the AVX-512 CPUs this was built on; on AVX2 ones its kernel changes the summation with the rows."""
    from .linear_select import kernel_row_independent

    with torch.inference_mode():
        return kernel_row_independent("fp16w", shape)


def serve_all_rows(module) -> bool:
    """Give an fp16w layer adaspec's kernel for *every* product when FBGEMM's rows depend on the row
    count for its shape here and the kernel runs: its bits then never depend on how many rows share a
    call (a verify row equals a decode row, R-B2). False (nothing changed) otherwise."""
    if unavailable() is not None or module.native_gemm is not None \
            or fbgemm_row_independent((module.out_features, module.in_features)):
        return False
    pack, gemm = _functions()
    weights = module.dense_weight() if module.weight16 is None else module.weight16.float()
    module.native_gemm, module.native_all = NativeF16w(weights, gemm, pack), True
    return True


def rows_from_speedups(speedups: dict[int, float], margin: float = MARGIN) -> frozenset[int]:
    """Row counts 1..MAX_ROWS for gemm.cpp, from {timed row count: FBGEMM time / gemm.cpp time}: those
    whose nearest timed count (ties: the lower) was at least `margin` faster in gemm.cpp."""
    timed = sorted(speedups)
    out = set()
    for m in range(1, MAX_ROWS + 1):
        nearest = min(timed, key=lambda t: (abs(t - m), t))
        if speedups[nearest] >= margin:
            out.add(m)
    return frozenset(out)


def measure_rows(layers: list, repeats: int = REPEATS) -> dict:
    """Time FBGEMM and gemm.cpp on `layers` (attached Fp16wLinear, in model order, up to SAMPLE_PARAMS
    weights) at each of TIMED_ROWS. Each repeat times one pass of each kernel back to back (their order
    alternating between repeats); a row count's speed-up is the median over repeats of those pairs' ratios, so
    the VM's drift between passes seconds apart cancels (stop 58: the minimum of each kernel's passes put 1 row
    at 0.82x in one process and 1.24x in the next).
    -> {"rows": frozenset served by gemm.cpp, "speedups": {row count: FBGEMM / gemm.cpp}, "seconds"}."""
    t_start = time.perf_counter()
    sample, params = [], 0
    for module in layers:
        if params >= SAMPLE_PARAMS:
            break
        sample.append(module)
        params += module.in_features * module.out_features
    g = torch.Generator().manual_seed(0)
    xs = {k: torch.randn(max(TIMED_ROWS), k, generator=g) for k in {m.in_features for m in sample}}
    ratios: dict[int, list[float]] = {m: [] for m in TIMED_ROWS}
    for rep in range(repeats):
        for m in TIMED_ROWS:
            took = {}
            for kind in (("fbgemm", "native") if rep % 2 == 0 else ("native", "fbgemm")):
                t0 = time.perf_counter()
                for module in sample:
                    x = xs[module.in_features][:m]
                    module.native_gemm(x) if kind == "native" else module._fbgemm(x)
                took[kind] = time.perf_counter() - t0
            ratios[m].append(took["fbgemm"] / took["native"])
    speedups = {m: statistics.median(r) for m, r in ratios.items()}
    return {"rows": rows_from_speedups(speedups), "speedups": speedups, "seconds": time.perf_counter() - t_start}


def attach(root: torch.nn.Module, seed: int = 0, rows=None) -> dict:
    """Give every fp16w layer under `root` gemm.cpp where it matches FBGEMM bit for bit, for the row
    counts `rows` (default: measured on the first model attached in this process, `measure_rows`).

    Returns {"attached": n, "mismatched": [names], "reason": why none (or None), "rows": sorted row
    counts gemm.cpp serves, "speedups": the measurement behind them (None when `rows` was given)}."""
    from .linear import Fp16wLinear

    reason = unavailable()
    report = {"attached": 0, "mismatched": [], "reason": reason, "rows": [], "speedups": None,
              "all_rows": sum(getattr(m, "native_all", False) for m in root.modules())}
    if reason is not None:
        return report
    pack, gemm = _functions()
    g = torch.Generator().manual_seed(seed)
    attached = []
    for name, module in root.named_modules():
        if not isinstance(module, Fp16wLinear) or module.native_gemm is not None:
            continue
        if serve_all_rows(module):
            report["all_rows"] += 1
            continue
        weights = module.dense_weight() if module.weight16 is None else module.weight16.float()
        native = NativeF16w(weights, gemm, pack)
        xs = [torch.randn(m, module.in_features, generator=g) for m in PROBE_ROWS]
        if all(torch.equal(native(x), module._fbgemm(x)) for x in xs):
            module.native_gemm = native
            attached.append(module)
        else:
            report["mismatched"].append(name)
    report["attached"] = len(attached)
    if report["mismatched"] and not attached and not report["all_rows"]:
        report["reason"] = "its products differ from FBGEMM's in the last bits on this machine"
    if attached:
        if rows is None:
            if not _measured:
                _measured.update(measure_rows(attached))
            rows, report["speedups"] = _measured["rows"], dict(_measured["speedups"])
        rows = frozenset(rows)
        for module in attached:
            module.native_rows = rows
        report["rows"] = sorted(rows)
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


def spans(rows) -> str:
    """Sorted row counts as ranges: [4, 5, 6, 8] -> '4-6, 8'."""
    out, rows = [], sorted(rows)
    i = 0
    while i < len(rows):
        j = i
        while j + 1 < len(rows) and rows[j + 1] == rows[j] + 1:
            j += 1
        out.append(str(rows[i]) if i == j else f"{rows[i]}-{rows[j]}")
        i = j + 1
    return ", ".join(out)


def describe(report: dict) -> str:
    """One start-up line's worth: what `attach` did."""
    if report["reason"] is not None:
        return f"fp16w products in FBGEMM at every row count ({report['reason']})"
    if report.get("all_rows") and not report["attached"]:
        return (f"fp16w products of every row count in adaspec's kernel ({report['all_rows']} layers: FBGEMM's "
                "summation changes with the row count on this CPU, adaspec's does not)")
    if not report["rows"]:
        said = "fp16w products in FBGEMM at every row count (adaspec's kernel was not faster at any of 1-" \
               f"{MAX_ROWS} rows here)"
    else:
        said = f"fp16w products of {spans(report['rows'])} rows in adaspec's kernel (bit-identical to FBGEMM, " \
               f"checked per layer: {report['attached']} layers)"
    if report.get("speedups"):
        said += "; measured FBGEMM / adaspec's kernel time at " + ", ".join(
            f"{m}: {r:.2f}" for m, r in sorted(report["speedups"].items())) + " rows"
    if report["mismatched"]:
        said += f"; {len(report['mismatched'])} layers differ and keep FBGEMM"
    if report.get("all_rows"):
        said += f"; {report['all_rows']} layers run every product in it (FBGEMM's rows depend on M for their shapes)"
    return said
