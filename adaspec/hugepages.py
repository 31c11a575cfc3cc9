"""Transparent huge pages for the process's memory: glibc's `glibc.malloc.hugetlb=1` tunable.

Decoding on a CPU streams every weight once per round, and a round's temporaries are fresh memory
whenever their sizes change. With the kernel's default transparent-huge-page mode `madvise`, glibc
hands out 4 KiB pages: on the 2-vCPU VMs of this project a minor page fault costs ~20 us (one
DSpark refresh of 2,700 positions took 156 ms the first time, 49 ms after: 4,654 faults), and
plain decode streams its weights through 4 KiB TLB entries. With `glibc.malloc.hugetlb=1` glibc
advises the kernel to back its heap and its large allocations with 2 MiB pages (glibc >= 2.35):
decoding ran 1-4.5% faster (BENCHMARKS.md, "Huge pages"). The tunable is read when a process
starts, so a command that wants it sets it and executes itself again, once, before any work.

`reexec_with_hugepages()` does that for adaspec's entry points (the `adaspec` command, bench
scripts). It changes nothing where it cannot help (not Linux, not glibc >= 2.35, huge pages off or
already `always`), where the tunable is already set, or when `ADASPEC_HUGEPAGES=0`. Library users
who build an `LLM` in their own process set `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` themselves;
`describe()` is the start-up log line that says which case applies.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Mapping

TUNABLE = "glibc.malloc.hugetlb"
SWITCH = "ADASPEC_HUGEPAGES"  # "0" turns the re-execution off
_GUARD = "ADASPEC_HUGEPAGES_REEXEC"  # set in the re-executed process: never a second time
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode(path: str = THP_ENABLED) -> str | None:
    """The kernel's transparent-huge-page mode ('always', 'madvise', 'never'), None if unknown."""
    try:
        with open(path) as f:
            m = re.search(r"\[(\w+)\]", f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def glibc_version() -> tuple[int, int] | None:
    try:
        m = re.match(r"glibc (\d+)\.(\d+)", os.confstr("CS_GNU_LIBC_VERSION") or "")
    except (ValueError, OSError, AttributeError):
        return None
    return (int(m.group(1)), int(m.group(2))) if m else None


def tunable_set(environ: Mapping[str, str]) -> bool:
    return any(t.split("=", 1)[0] == TUNABLE for t in environ.get("GLIBC_TUNABLES", "").split(":") if t)


def plan(environ: Mapping[str, str], platform: str, thp: str | None, glibc: tuple[int, int] | None) -> str | None:
    """The GLIBC_TUNABLES value to execute again with, or None to run as is."""
    if (environ.get(SWITCH, "1") == "0" or environ.get(_GUARD) or tunable_set(environ)
            or not platform.startswith("linux") or thp != "madvise" or glibc is None or glibc < (2, 35)):
        return None
    old = environ.get("GLIBC_TUNABLES", "")
    return f"{old}:{TUNABLE}=1" if old else f"{TUNABLE}=1"


def reexec_with_hugepages() -> None:
    """Execute this command line again with huge pages, when that helps (module docstring); returns
    only when it does not. Call it first thing in a program's entry point, never from library code."""
    value = plan(os.environ, sys.platform, thp_mode(), glibc_version())
    argv = getattr(sys, "orig_argv", None)
    if value is None or not argv:
        return
    env = dict(os.environ, GLIBC_TUNABLES=value, **{_GUARD: "1"})
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, list(argv), env)
    except OSError:  # cannot execute again: run on with 4 KiB pages (describe() says so)
        return


def describe(environ: Mapping[str, str] | None = None) -> str:
    """One start-up log line: which pages this process's heap gets, and how to change it."""
    environ = os.environ if environ is None else environ
    thp = thp_mode()
    if not sys.platform.startswith("linux") or thp is None:
        return "[adaspec] memory: the system's default pages (transparent huge pages are Linux's)"
    if thp == "always":
        return "[adaspec] memory: transparent huge pages (the kernel's mode is 'always')"
    if thp == "never":
        return "[adaspec] memory: 4 KiB pages (transparent huge pages are off in the kernel: 'never')"
    glibc = glibc_version()
    if glibc is None or glibc < (2, 35):
        return "[adaspec] memory: 4 KiB pages (glibc >= 2.35 is needed for huge pages through malloc)"
    if tunable_set(environ):
        return f"[adaspec] memory: transparent huge pages for the heap ({environ.get('GLIBC_TUNABLES')})"
    why = (f"{SWITCH}=0" if environ.get(SWITCH) == "0"
           else "not started through the `adaspec` command; start Python with "
                f"GLIBC_TUNABLES={TUNABLE}=1 for huge pages, 1-4.5% faster decoding here")
    return f"[adaspec] memory: 4 KiB pages ({why})"
