"""A few bad inputs through a real `adaspec` process: the exit status and stderr a shell sees (issue 8).

The in-process tests cover the cases; these check what only a process shows: the status code
returned to the shell, and that nothing else (no traceback, no usage dump) reaches stderr.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    (["adaspec.cli", "generate", "--model=/nonexistent/model", "--prompt=hi"], "--model"),
    (["adaspec.cli", "generate", "--prompt=hi", "--top_p=2"], "--top_p"),
    (["adaspec.cli", "generate", "--prompt=hi", "--max_tokns=3"], "adaspec generate --help"),
    (["adaspec.training.cli", "--kind=mtp", "--output=/tmp/adaspec-never-written", "--max_minutes=nan"], "--max_minutes"),
]


@pytest.mark.parametrize("argv, name", CASES, ids=[c[1] for c in CASES])
def test_process_exit_status_and_one_line(argv, name):
    p = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0] and name in lines[0], p.stderr
    assert "Traceback" not in p.stderr and "Value error" not in p.stderr and p.stdout == ""
