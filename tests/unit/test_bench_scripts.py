"""Every benchmark script imports and parses its --help (a bench is a script, not a test, but one that
no longer imports is a broken reproduction command in BENCHMARKS.md)."""

from __future__ import annotations

import importlib
import inspect
import sys
import time
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


def test_staggered_arrivals_join_a_running_batch_and_change_no_output(tiny_llama_dir):
    """bench/common.serve with arrival_gap_s (issue 13 item 5's staggered stream): requests arrive
    over time, so the batch size changes from round to round, and greedy outputs are those of the
    all-at-once stream."""
    from adaspec import LLM
    from bench import common

    llm = LLM(str(tiny_llama_dir), max_seqs_per_batch=4, max_model_len=128)
    prompts = [common.Prompt("code", f"p{i}", tuple(range(3 + i, 12 + 2 * i))) for i in range(6)]
    at_once = common.serve(llm, prompts, 4, 12, ignore_eos=True)
    # a gap far longer than a 12-token request of the tiny model: each one runs alone, and the
    # idle stretches between arrivals are skipped, not waited for
    t0 = time.perf_counter()
    staggered = common.serve(llm, prompts, 4, 12, ignore_eos=True, arrival_gap_s=30.0)
    assert time.perf_counter() - t0 < 30
    assert staggered.outputs == at_once.outputs and all(len(o) == 12 for o in staggered.outputs)
    assert staggered.stats["mean_batch"] == 1.0 < at_once.stats["mean_batch"]
    llm.close()
