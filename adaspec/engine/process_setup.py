"""Process-wide set-up an engine does once: torch threads and the CPU allocator's thresholds."""

from __future__ import annotations

import os

import torch


def configure_threads(threads: int) -> None:
    """Default 1 thread; with more, OpenMP must not spin (NOTES.md: 1 s stalls on this machine)."""
    if threads > 1:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    torch.set_num_threads(threads)


def configure_allocator() -> bool:
    """Keep freed activation buffers in the process heap instead of returning them to the OS.

    glibc serves large allocations with mmap and gives them back on free, so every round's
    activations came back as fresh zeroed pages: ~11k page faults (~42 MB) per round at 16 requests,
    about 20% of such a round on one CPU core (issue 13). Raising the mmap threshold to its maximum
    (32 MB) and the trim threshold to 256 MB removes them. Linux/glibc only; elsewhere a no-op."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 256 << 20))
    except (OSError, AttributeError):
        return False
