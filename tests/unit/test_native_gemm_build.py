"""The fp16w kernel is built where the CPU can run it (models/native_gemm.py, kernels/build.py; issue 14, R-A1).

kernels/build.py falls back to generic flags when `-march=native` fails to compile, and the kernel then reports that
the CPU lacks AVX, which test_native_gemm.py skips as a CPU without it. On a CPU that has the instructions that must
fail loudly instead (stop 58: a missing include in gemm.cpp's AVX-512 branch hid the kernel exactly this way).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adaspec.kernels import build
from adaspec.models import native_gemm


def _cpu_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    return set(cpuinfo.read_text().split()) if cpuinfo.is_file() else set()


def test_a_cpu_with_the_instructions_gets_the_kernel():
    flags = _cpu_flags()
    if not ({"avx512f", "f16c"} <= flags or {"avx2", "fma", "f16c"} <= flags):
        pytest.skip("neither AVX-512 with F16C nor AVX2 with FMA and F16C here (or no /proc/cpuinfo)")
    if build.compiler() is None:
        pytest.skip("no C++ compiler on this machine: the native kernels cannot be built")
    if build.disabled() is not None:
        pytest.skip(build.disabled())
    assert native_gemm.unavailable() is None


def test_a_failed_native_build_is_named_not_taken_for_a_cpu_without_avx(monkeypatch, tmp_path):
    """-march=native failing (here: a flag the compiler rejects) leaves a generic library whose SIMD paths are compiled
    out; the reason the kernel gives then quotes the compiler, instead of blaming the CPU."""
    if build.compiler() is None:
        pytest.skip("no C++ compiler on this machine: the native kernels cannot be built")
    monkeypatch.setenv("ADASPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "NATIVE_FLAGS", ["-mno-such-flag-for-adaspec"])
    build._load.cache_clear()
    native_gemm._functions.cache_clear()
    try:
        assert not isinstance(build.load(), str)  # the generic build works
        said = build.native_build_error()
        assert said is not None and "error" in said
        reason = native_gemm.unavailable()
        assert reason is not None and "-march=native build, which failed" in reason and said in reason
    finally:  # the next load (after monkeypatch's undo) builds with the real flags again
        build._load.cache_clear()
        native_gemm._functions.cache_clear()
