"""Configuration names of bench/adaptive.py (see its module docstring)."""

from __future__ import annotations

from typing import NamedTuple


class StepFamily(NamedTuple):
    """A draft-step family: fixed k = 1..k_max (`{fixed}{k}`) and the adaptive draft step's configurations."""
    fixed: str  # name prefix of the fixed-k configurations
    adaptive: tuple[str, ...]
    oracle: str | None  # the oracle the report compares with (None: none)


STEP_FAMILIES = {"mtp_step": StepFamily("mtp_k", ("mtp_step", "mtp_step_sym", "mtp_step_alt"), "mtp5_oracle"),
                 "hyb_step": StepFamily("hyb_k", ("hyb_step",), None)}  # MTP+Suffix (issue 10)
VERIFY_FAMILIES = {"dspark7": ("DSpark", 7), "mtp5": ("MTP", 5)}
FAMILIES = (*STEP_FAMILIES, *VERIFY_FAMILIES)  # every family the report compares within, in its order


def all_configs(k_max: int) -> list[str]:
    names = ["plain"]
    for fam in STEP_FAMILIES.values():
        names += [f"{fam.fixed}{k}" for k in range(1, k_max + 1)] + list(fam.adaptive)
    for fam, (_, w) in VERIFY_FAMILIES.items():
        names += [f"{fam}_full"] + [f"{fam}_L{L}" for L in range(1, w)] + [f"{fam}_sync", f"{fam}_async", f"{fam}_oracle"]
    return names


def config_kind(name: str) -> dict:
    """What a configuration name means: engine, hook, family."""
    if name == "plain":
        return {"engine": "plain", "hook": None, "family": None}
    for fam, members in STEP_FAMILIES.items():  # k range checked by parse_args
        if name.startswith(members.fixed) or name in members.adaptive:
            return {"engine": name, "hook": None, "family": fam}
    fam, _, rest = name.partition("_")
    if fam not in VERIFY_FAMILIES:
        raise SystemExit(f"--configs: unknown configuration {name!r}")
    w = VERIFY_FAMILIES[fam][1]
    full_engine = f"mtp_k{w}" if fam == "mtp5" else f"{fam}_full"
    if rest == "full":
        return {"engine": full_engine, "hook": None, "family": fam}
    if rest in ("sync", "async"):
        return {"engine": name, "hook": None, "family": fam}
    if rest == "oracle":
        return {"engine": full_engine, "hook": ("oracle", None), "family": fam}
    if rest.startswith("L") and rest[1:].isdigit() and 1 <= int(rest[1:]) < w:
        return {"engine": full_engine, "hook": ("prefix", int(rest[1:])), "family": fam}
    raise SystemExit(f"--configs: unknown configuration {name!r}")


def engine_of(name: str, interleave: bool = False) -> str:
    """The engine that serves configuration `name`. Under --interleave a fixed verify length L gets a full-width
    engine of its own (built as `name`, its plan hook installed for the whole repeat), since its rounds alternate
    with the full-width configuration's and the family's other lengths; otherwise it shares the family's
    full-width engine and the hook is installed for its run only."""
    kind = config_kind(name)
    if interleave and kind["hook"] is not None and kind["hook"][0] == "prefix":
        return name
    return kind["engine"]
