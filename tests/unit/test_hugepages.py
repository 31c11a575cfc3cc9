"""Huge pages through glibc's malloc tunable (adaspec/hugepages.py): when a command executes itself
again, with what, and that the re-executed process really runs with it."""

import os
import subprocess
import sys

import pytest

from adaspec import hugepages
from adaspec.hugepages import TUNABLE, plan

LINUX = "linux"
NEW = (2, 36)


def test_plan_sets_the_tunable_where_it_helps():
    assert plan({}, LINUX, "madvise", NEW) == f"{TUNABLE}=1"


def test_plan_keeps_other_tunables():
    env = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}
    assert plan(env, LINUX, "madvise", NEW) == f"glibc.malloc.arena_max=2:{TUNABLE}=1"


@pytest.mark.parametrize("env, platform, thp, glibc", [
    ({hugepages.SWITCH: "0"}, LINUX, "madvise", NEW),  # turned off
    ({"GLIBC_TUNABLES": f"{TUNABLE}=0"}, LINUX, "madvise", NEW),  # the user chose a value: kept
    ({"GLIBC_TUNABLES": f"x=1:{TUNABLE}=1"}, LINUX, "madvise", NEW),  # already set
    ({"ADASPEC_HUGEPAGES_REEXEC": "1"}, LINUX, "madvise", NEW),  # executed again once already
    ({}, "darwin", "madvise", NEW),
    ({}, LINUX, "always", NEW),  # the kernel gives huge pages anyway
    ({}, LINUX, "never", NEW),  # nothing to ask for
    ({}, LINUX, None, NEW),  # no THP interface
    ({}, LINUX, "madvise", (2, 34)),  # glibc without the tunable
    ({}, LINUX, "madvise", None),  # not glibc
])
def test_plan_runs_as_is_where_it_cannot_help(env, platform, thp, glibc):
    assert plan(env, platform, thp, glibc) is None


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert hugepages.thp_mode(str(f)) == "madvise"
    assert hugepages.thp_mode(str(tmp_path / "missing")) is None


def test_describe_names_the_case():
    assert "huge pages" in hugepages.describe({"GLIBC_TUNABLES": f"{TUNABLE}=1"})
    if hugepages.thp_mode() == "madvise" and (hugepages.glibc_version() or (0, 0)) >= (2, 35):
        line = hugepages.describe({})
        assert "4 KiB pages" in line and "GLIBC_TUNABLES" in line
        assert f"{hugepages.SWITCH}=0" in hugepages.describe({hugepages.SWITCH: "0"})


@pytest.mark.skipif(plan({}, sys.platform, hugepages.thp_mode(), hugepages.glibc_version()) is None,
                    reason="this machine would not execute again (no madvise THP or old glibc)")
def test_a_command_executes_itself_once_with_the_tunable():
    code = ("import os, sys; from adaspec.hugepages import reexec_with_hugepages; "
            "print('start', flush=True); reexec_with_hugepages(); "
            "print(os.environ.get('GLIBC_TUNABLES'), sys.argv[1:])")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", hugepages.SWITCH,
                                                            "ADASPEC_HUGEPAGES_REEXEC")}
    out = subprocess.run([sys.executable, "-c", code, "arg1", "--flag=2"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == ["start", "start", f"{TUNABLE}=1 ['arg1', '--flag=2']"]
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(env, **{hugepages.SWITCH: "0"}), timeout=60)
    assert off.stdout.splitlines() == ["start", "None []"]
