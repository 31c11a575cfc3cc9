"""Flag value parsers shared by every command line (`adaspec ...`, `adaspec train-draft`)."""

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
