"""Per cell and repeat: every adaptive config / plain and / the best fixed setting of its family (MTP fixed k for
mtp_step; DSpark has no fixed config in the run, so plain and MTP for dspark7_sync), from bench/adaptive.py's stderr.
usage: ratios_all.py ERR"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from bench.adaptive_ratios import table  # noqa: E402


def is_fixed(cfg):
    return cfg == "plain" or cfg.startswith("mtp_k")


print(table(sys.argv[1], lambda c: None if is_fixed(c) else is_fixed, "÷ best fixed per repeat (median)"))
