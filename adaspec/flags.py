"""Flag value parsers shared by every command line (`adaspec ...`, `adaspec train-draft`).

Each raises argparse.ArgumentTypeError with the reason; `adaspec.cli` turns it into one line
naming the flag and the value (exit status 2).
"""

from __future__ import annotations

import argparse


def parse_bool(value: str) -> bool:
    """Booleans in the seed's style: `--flag=true|false` (1/0 and yes/no accepted too)."""
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def finite_float(value: str) -> float:
    """A float flag: NaN and infinity are refused (they would silently disable range checks)."""
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {value!r}")
    return v


def positive_float(value: str) -> float:
    v = finite_float(value)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value!r}")
    return v


def fraction(value: str) -> float:
    """A float in (0, 1]."""
    v = finite_float(value)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value!r}")
    return v


def integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None


def positive_int(value: str) -> int:
    v = integer(value)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value!r}")
    return v


def thread_count(value: str) -> int:
    """--threads: >= 1 and at most config.MAX_THREADS (OpenMP crashes the process starting ~16k threads)."""
    from .config import MAX_THREADS

    v = positive_int(value)
    if v > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_THREADS} (use at most this machine's core count), "
                                         f"got {value!r}")
    return v


def nonnegative_int(value: str) -> int:
    v = integer(value)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value!r}")
    return v
