"""Every benchmark script imports and parses its --help (a bench is a script, not a test, but one that
no longer imports is a broken reproduction command in BENCHMARKS.md)."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "bench").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", SCRIPTS)
def test_bench_script_imports_and_answers_help(name, capsys, monkeypatch):
    mod = importlib.import_module(f"bench.{name}")
    main = getattr(mod, "main", None)
    if main is None:
        return  # a helper module of the benches (configs, hooks, report, common)
    monkeypatch.setattr(sys, "argv", [f"bench/{name}.py", "--help"])
    with pytest.raises(SystemExit) as e:
        main(["--help"]) if inspect.signature(main).parameters else main()
    assert e.value.code == 0
    assert "usage" in capsys.readouterr().out.lower()
