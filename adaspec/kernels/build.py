"""Build adaspec's C++ layer kernels once per machine and load them with ctypes (issue 14).

torch ships no CPU attention kernel that is fast for the few query rows of decoding and gives a row
the same bits whatever else shares the call (models/attention.py says why both matter), and a small
model's decode step spends more in torch's per-op dispatch than in its norms and activations. So
adaspec carries two small C++ files (`attention.cpp`, `elementwise.cpp`; models/native_kernels.py
calls them). They need nothing but a C++ compiler: no torch headers, no Python extension API, so
they compile in a couple of seconds, with `-O3 -march=native` for the CPU they run on. The shared
library is cached under `$ADASPEC_CACHE_DIR/kernels` (default `~/.cache/adaspec`), keyed by the
sources, the compiler, the flags and this CPU, and is written atomically, so concurrent processes
(data-parallel shards, tensor-parallel ranks) can race to build it safely.

Without a compiler (or when the build fails) `load()` returns the reason instead of a library and
the engine keeps torch's ops: `--layer_kernels=auto` says so in its start-up line.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

SOURCES = [Path(__file__).with_name(name)
           for name in ("attention.cpp", "elementwise.cpp", "gemm.cpp", "gemm_avx512.cpp")]
HEADERS = [Path(__file__).with_name("simd.h")]
ABI = 4  # adaspec_kernel_abi() of the sources above
# no -ffast-math: the kernels' sums run in the order the source writes them (row-independent bits).
# -ffp-contract=fast fuses a * b + c into one FMA where the source writes it; the compiler decides
# that per expression, so every row runs the same instructions (20% faster prefill here than off)
FLAGS = ["-O3", "-std=c++17", "-fPIC", "-shared", "-ffp-contract=fast", "-fno-math-errno"]
NATIVE_FLAGS = ["-march=native"]


def cache_dir() -> Path:
    """adaspec's cache directory: `$ADASPEC_CACHE_DIR`, default `~/.cache/adaspec`."""
    return Path(os.environ.get("ADASPEC_CACHE_DIR") or Path.home() / ".cache" / "adaspec").expanduser()


def compiler() -> str | None:
    """The C++ compiler: `$CXX`, else c++, g++ or clang++ on PATH; None when there is none."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cpu_signature() -> str:
    """What -march=native depends on: the machine and, on Linux, the CPU model and its flags."""
    sig = platform.machine()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return sig
    for key in ("model name", "flags", "Features", "CPU part"):
        for line in text.splitlines():
            if line.startswith(key):
                sig += "|" + line.split(":", 1)[-1].strip()
                break
    return sig


def _version(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _compile(cxx: str, sources: list[Path], target: Path, flags: list[str]) -> str | None:
    """Compile `sources` into `target` (atomically); the compiler's complaint on failure, else None."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
    except OSError as e:  # a cache directory that cannot be written: a reason, not a crash
        return f"cannot write {target.parent} ({e.strerror}); set ADASPEC_CACHE_DIR to a writable directory"
    try:
        done = subprocess.run([cxx, *flags, "-o", tmp, *map(str, sources)], capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            errors = [line.strip() for line in said if "error" in line]  # the first error names the cause
            return errors[0] if errors else (said[-1] if said else f"exit status {done.returncode}")
        os.replace(tmp, target)
        return None
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def disabled() -> str | None:
    """Why the kernels are turned off by the environment (`ADASPEC_NATIVE_KERNELS=0`), else None. It
    decides what `--layer_kernels=auto` resolves to for models loaded while it is set."""
    return "ADASPEC_NATIVE_KERNELS=0 is set" if os.environ.get("ADASPEC_NATIVE_KERNELS", "1") == "0" else None


def load() -> ctypes.CDLL | str:
    """The kernel library (built on first use), or a one-line reason why there is none."""
    return disabled() or _load()


def native_build_error() -> str | None:
    """The compiler's complaint when the library had to be built without -march=native (its SIMD paths, AVX-512 or
    AVX2, are then compiled out, and the kernels read as if the CPU lacked them); None when it was not."""
    lib = load()
    return None if isinstance(lib, str) else lib.native_build_error


@lru_cache(maxsize=None)
def _load() -> ctypes.CDLL | str:
    cxx = compiler()
    if cxx is None:
        return "no C++ compiler found (install g++ or clang++, or set CXX)"
    text = b"\0".join(f.read_bytes() for f in SOURCES + HEADERS)
    version = _version(cxx)
    errors = []
    for flags in (FLAGS + NATIVE_FLAGS, FLAGS):  # a compiler that does not know -march=native still builds
        key = hashlib.sha256(b"\0".join([text, cxx.encode(), version.encode(), " ".join(flags).encode(),
                                         _cpu_signature().encode()])).hexdigest()[:16]
        target = cache_dir() / "kernels" / f"layer-{key}.so"
        if not target.exists():
            error = _compile(cxx, SOURCES, target, flags)
            if error is not None:
                errors.append(error)
                continue
        try:
            lib = ctypes.CDLL(str(target))
        except OSError as e:
            errors.append(str(e))
            continue
        if lib.adaspec_kernel_abi() != ABI:
            errors.append(f"{target} reports kernel ABI {lib.adaspec_kernel_abi()}, expected {ABI}")
            continue
        lib.native_build_error = errors[0] if errors else None  # a generic build after -march=native failed
        return lib
    return f"the layer kernels did not build with {cxx}: {errors[-1] if errors else 'unknown error'}"
