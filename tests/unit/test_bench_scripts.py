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


def test_paired_ratios_are_per_child_and_the_best_fixed_is_chosen_on_them():
    """bench/adaptive.py --paired (issue 13's floor): a child's ratio is its own tokens/CPU-s over its own
    plain runs', and the paired comparison picks the best fixed setting by the medians of those ratios."""
    from types import SimpleNamespace

    from bench.adaptive_isolated import pair_ratio
    from bench.adaptive_report import add_paired, target_rows
    from bench.common import Run

    def run(tokens, cpu):
        return Run(config="x", outputs=[[0] * tokens], wall_s=cpu, cpu_s=cpu, tpot_ms=[1.0], stats={})

    # 100 tokens in 2 s + 100 in 3 s = 40 tok/s against plain's 200 tokens in 4 s = 50 tok/s
    assert pair_ratio([run(100, 2.0), run(100, 2.0)], [run(100, 2.0), run(100, 3.0)]) == pytest.approx(0.8)

    def row(name, tok_s):
        return {"config": name, "tok_s": tok_s, "ratio_to_plain": tok_s / 100, "controller_share": None,
                "chosen": None, "chosen_axis": None}

    # unpaired medians say mtp_k1 beats plain; the children's own ratios say it loses to plain
    rows = {"plain": row("plain", 100.0), "mtp_k1": row("mtp_k1", 104.0), "mtp_step": row("mtp_step", 101.0)}
    add_paired(rows, {"mtp_k1": [0.97, 0.99, 0.98], "mtp_step": [0.995, 1.01, 0.99, 1.0]})
    assert rows["plain"]["paired"]["median"] == 1.0
    assert rows["mtp_step"]["paired"]["n"] == 4 and rows["mtp_step"]["paired"]["median"] == pytest.approx(0.9975)
    args = SimpleNamespace(configs=["plain", "mtp_k1", "mtp_step"], k_max=1)
    (t,) = target_rows(args, {("float32", "mixed", 8): rows})
    assert t["best_fixed"] == "mtp_k1" and t["paired_best_fixed"] == "plain"
    assert t["paired_vs_best_fixed"] == pytest.approx(0.9975)
    assert t["paired_range"] == [0.99, 1.01]
    # MTP+Suffix is its own family: hyb_step against plain and hyb_k*, the best of any fixed setting beside it
    rows = {"plain": row("plain", 100.0), "mtp_k1": row("mtp_k1", 130.0), "hyb_k1": row("hyb_k1", 150.0),
            "hyb_step": row("hyb_step", 147.0), "mtp_step": row("mtp_step", 128.0)}
    args = SimpleNamespace(configs=list(rows), k_max=1)
    by_mode = {t["adaptive"]: t for t in target_rows(args, {("float32", "mixed", 1): rows})}
    assert by_mode["hyb_step"]["best_fixed"] == "hyb_k1" and by_mode["hyb_step"]["vs_best_fixed"] == pytest.approx(0.98)
    assert by_mode["mtp_step"]["best_fixed"] == "mtp_k1" and by_mode["mtp_step"]["best_any_fixed"] == "hyb_k1"
    assert by_mode["hyb_step"]["vs_oracle"] is None


@pytest.mark.parametrize("argv, message", [
    (["--paired"], "--paired needs --isolate"),
    (["--isolate", "--paired", "--configs=plain,dspark7_oracle"], "does not measure oracle"),
    (["--interleave", "--configs=plain,dspark7_oracle"], "dspark7_oracle verify against plain's finished"),
    (["--interleave", "--configs=plain,dspark7_full,dspark7_L2,dspark7_sync"], None),  # L2: an engine of its own
    (["--interleave", "--configs=plain,hyb_k2,hyb_step,mtp_step"], None),  # MTP+Suffix, fixed and adaptive
    (["--configs=plain,hyb_k7"], "hyb_k7 is outside k = 1..--k_max"),
    (["--interleave", "--configs=plain,dspark7_sync,dspark7_async"], "dspark7_async overlap a round"),
    (["--interleave", "--configs=plain,mtp_k5,mtp5_full", "--k_max=5"], None),  # one engine, measured once
    (["--interleave", "--configs=plain,mtp_k1", "--sources=mixed,staggered"], "staggered stream"),
    (["--interleave", "--configs=plain,mtp_k1", "--isolate"], "replaces --isolate"),
])
def test_paired_and_interleave_are_refused_where_they_cannot_measure(argv, message, capsys):
    from bench.adaptive import parse_args

    if message is None:
        args = parse_args(argv)
        assert args.configs == [c for c in argv[1].partition("=")[2].split(",") if c != "mtp5_full"]
        return
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_interleaved_engines_serve_what_they_serve_alone_each_on_its_own_clock(tiny_llama_dir, monkeypatch):
    """bench/adaptive.py --interleave: engines stepped in turn give the outputs of a lone run (the same seeds, so at
    T > 0 too), and each Run's clock sums its own rounds only: an engine whose rounds are slowed by 20 ms is
    charged those, the other engine is not."""
    from adaspec import LLM
    from bench import common
    from bench.adaptive_interleaved import serve_interleaved

    a = LLM(str(tiny_llama_dir), max_seqs_per_batch=2, max_model_len=128)
    b = LLM(str(tiny_llama_dir), max_seqs_per_batch=2, max_model_len=128)
    prompts = [common.Prompt("code", f"p{i}", tuple(range(3 + i, 12 + 2 * i))) for i in range(3)]
    alone = common.serve(a, prompts, 2, 10, ignore_eos=True, temperature=0.8)
    step = b.engine.step

    def slow():
        time.sleep(0.02)
        return step()
    monkeypatch.setattr(b.engine, "step", slow)
    runs = serve_interleaved({"a": a, "b": b}, prompts, 2, 10, ignore_eos=True, temperature=0.8)
    assert runs["a"].outputs == runs["b"].outputs == alone.outputs
    rounds = runs["b"].stats["decode_rounds"]
    assert rounds >= 15 and runs["b"].wall_s >= 0.02 * rounds > runs["a"].wall_s
    assert runs["a"].tokens == runs["b"].tokens == 30
    a.close()
    b.close()


def test_interleaved_fixed_verify_length_runs_on_its_own_engine_with_its_hook(tiny_llama_dir):
    """--interleave with a fixed verify length (issue 13, R-I3: every fixed setting in the interleaved grid): mtp5_L1
    runs on a full-width engine of its own, its rounds verify at most one draft token per request while the
    full-width engine's verify more, both give plain's greedy output, and the hook is gone after the repeat."""
    from types import SimpleNamespace

    from adaspec import LLM
    from bench import common
    from bench.adaptive_configs import engine_of
    from bench.adaptive_interleaved import interleave_error, measure_interleaved
    from tests.unit.replay_drafter import ReplayDrafter

    prompts = [common.Prompt("code", f"p{i}", tuple(range(3 + i, 12 + 2 * i))) for i in range(3)]
    plain = LLM(str(tiny_llama_dir), max_seqs_per_batch=2, max_model_len=128)
    alone = common.serve(plain, prompts, 2, 12, ignore_eos=True)
    refs = [list(p.ids) + out for p, out in zip(prompts, alone.outputs)]

    def spec():
        return LLM(str(tiny_llama_dir), drafter=ReplayDrafter(refs, max_steps=5, corrupt_every=7),
                   speculative_algorithm="MTP", num_speculative_tokens=5, max_seqs_per_batch=2, max_model_len=128)
    configs = ["plain", "mtp_k5", "mtp5_L1"]
    engines = {"plain": plain, "mtp_k5": spec(), "mtp5_L1": spec()}
    assert [engine_of(n, interleave=True) for n in configs] == configs
    assert engine_of("mtp5_L1") == "mtp_k5"  # whole runs in turn share the full-width engine
    args = SimpleNamespace(configs=configs, reset_controllers=True, max_tokens=12, ignore_eos=True, temperature=0.0,
                           isolate=False, paired=False, sources=["code"])
    assert interleave_error(args) is None
    runs = measure_interleaved(args, engines, prompts, 2, 0)
    assert runs["mtp_k5"].outputs == runs["mtp5_L1"].outputs == alone.outputs
    assert runs["mtp5_L1"].stats["mean_rows_per_request"] <= 2.0 < runs["mtp_k5"].stats["mean_rows_per_request"]
    assert engines["mtp5_L1"].engine.plan_transform is None
    for llm in engines.values():
        llm.close()


def test_batch_policy_replay_charges_rows_and_draft_steps():
    """bench/batch_policies.py (stop 40): B lockstep slots; a round costs T(rows) + D(steps) (T(B) when it
    does not draft); a slot advances accepted + 1. On synthetic anchors the arithmetic is checked by hand,
    and on these anchors the acceptance-known oracle is not below plain or any causal policy."""
    from bench.batch_policies import interpolate, policies, replay

    T = interpolate({2: 10.0, 4: 14.0, 6: 18.0})
    D = {0: 0.5, 1: 1.0, 2: 2.0}.__getitem__
    always = [(2, [0.9, 0.8])] * 6  # every anchor accepts both drafts
    never = [(0, [0.1, 0.01])] * 6
    queue = [always, never, always]
    table = {name: replay(queue, 2, pol, T, D) for name, pol in policies(2, 2, T, D).items()}
    # plain: 2 tokens per 10 ms round until the first sequence ends (6 rounds) and the queue has one left,
    # then the refill runs until the next end with an empty queue
    assert table["plain"] == 2 / 10.0
    # fixed k=1 on (always, never): rounds of 4 rows + 1 step = 15 ms; slot 0 moves 2, slot 1 moves 1
    assert table["fixed k=1"] == pytest.approx((2 + 1) * 3 / (15.0 * 3))
    assert table["oracle (acceptance known)"] >= max(v for k, v in table.items() if not k.startswith("oracle")) - 1e-12


def test_ratio_table_compares_each_adaptive_config_with_the_fixed_settings_its_rule_names(tmp_path):
    """bench/adaptive_ratios.py (the experiment records' per-repeat tables): per repeat over plain and over the best
    of plain and the fixed settings the rule names."""
    from bench.adaptive_ratios import table

    lines = [f"  [ 1 s] float32 B=1 code rep {rep} {cfg}  1024 tok  1 s wall /  1 s CPU =   {tps} tok/s CPU{rest}"
             for rep, runs in ((1, (("plain", 50.0, ""), ("mtp_k1", 60.0, ""), ("dspark7_L2", 80.0, ""),
                                    ("mtp_step", 66.0, ", acc. length 1.9, k 1:80%"))),
                               (2, (("plain", 40.0, ""), ("mtp_k1", 30.0, ""), ("dspark7_L2", 80.0, ""),
                                    ("mtp_step", 44.0, ", acc. length 1.9, k 0:90%"))))
             for cfg, tps, rest in runs]
    err = tmp_path / "grid.err"
    err.write_text("\n".join(lines) + "\n")
    out = table(str(err), lambda c: None if c == "plain" or c.startswith(("mtp_k", "dspark7_L"))
                else (lambda f: f.startswith("mtp_k")), "÷ best fixed")
    assert out.splitlines()[2] == ("| code B = 1 | mtp_step | 1.320, 1.100 (**1.210**) | 1.100, 1.100 (**1.100**) | "
                                   "mtp_k1/plain | k 0:90% |")
