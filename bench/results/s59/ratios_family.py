"""Per cell and repeat: every adaptive configuration over plain and over the best fixed setting of its own family plus
plain (mtp_step: fixed MTP k; hyb_step: fixed MTP+Suffix k; dspark7_*: DSpark's fixed verify lengths L and full
width; mtp5_*: MTP w = 5's), from bench/adaptive.py's stderr (stop 59: the fixed verify lengths run interleaved).
usage: ratios_family.py ERR"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from bench.adaptive_ratios import table  # noqa: E402

FAMILY = {"mtp_step": re.compile(r"mtp_k\d+$"), "hyb_step": re.compile(r"hyb_k\d+$"),
          "dspark7": re.compile(r"dspark7_(L\d+|full)$"), "mtp5": re.compile(r"(mtp5_L\d+|mtp_k5)$")}


def family(cfg):
    if cfg.startswith(("mtp_step", "hyb_step")):
        return cfg[:8]
    return cfg.partition("_")[0]


def fixed_of(cfg):
    if cfg == "plain" or any(p.match(cfg) for p in FAMILY.values()):
        return None
    return FAMILY[family(cfg)].match


print(table(sys.argv[1], fixed_of, "÷ best fixed of its family per repeat (median)"))
