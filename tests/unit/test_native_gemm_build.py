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
