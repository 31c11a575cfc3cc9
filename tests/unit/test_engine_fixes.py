"""Regression tests of the four engine fixes issue 9 needs before a server can run the engine.

1. abort() while a round runs on the overlap worker must not touch that round's refresh entries
   (it raised KeyError in the worker, and every later step raised again).
2. A stop string completed by a long token is found (the search window was len(stop) + 16 chars
   back from the end); checked with the real bundled tokenizer's 20-character whitespace token.
3. Async adaptive verify with more running requests than the largest prepared request bucket
   serves at full width instead of raising (R-D4, "no configuration may crash while serving").
4. Refusals before expensive work: `adaspec calibrate` decides about its plot (matplotlib) before
   calibrating; `adaspec serve` checks the cost-table output path before any model work.
"""

from __future__ import annotations

import json
import threading

import pytest

from adaspec.engine.llm_engine import LLM, LLMEngine
from adaspec.sampling_params import SamplingParams
from replay_drafter import ReplayDrafter
from small_calibration import CAL
from test_calibrate_cli import draft_dir  # noqa: F401,F811 - fixture: a tiny DSpark w=7 draft

PROMPTS = ["Hello there", "The quick brown fox", "1 2 3 4 5", "abc abc abc"]
SMALL = dict(max_seqs_per_batch=4, max_num_batched_tokens=32, max_model_len=320)


@pytest.fixture(scope="module")
def reference(tiny_llama_dir):
    llm = LLM(str(tiny_llama_dir), **SMALL)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    return params, llm.generate(PROMPTS, params)


def test_abort_while_the_overlapped_round_runs_keeps_the_engine_serving(tiny_llama_dir, reference):
    params, ref = reference
    drafter = ReplayDrafter([o.prompt_token_ids + o.token_ids for o in ref], max_steps=3)
    llm = LLM(str(tiny_llama_dir), drafter=drafter, speculative_algorithm="MTP", num_speculative_tokens=3,
              enable_schedule_overlap=True, **SMALL)
    eng = llm.engine
    ids = [eng.add_request(p, params) for p in PROMPTS]
    for _ in range(4):  # prefill and a few decode rounds, so every request has refresh entries
        eng.step()
    gate, inner = threading.Event(), eng.rounds.run

    def gated(chunks, plan):  # hold the worker before it reads the refresh entries
        gate.wait(10)
        return inner(chunks, plan)

    eng.rounds.run = gated
    eng.step()  # collects round n-1, launches round n on the worker (blocked at the gate)
    victim = ids[1]
    assert eng._inflight is not None and any(c.request.request_id == victim for c in eng._inflight[0].chunks)
    eng.abort(victim)  # before the fix: popped the entries the worker is about to read -> KeyError
    gate.set()
    eng.rounds.run = inner
    done = {}
    while eng.has_unfinished():
        for out in eng.step():
            if out.finished:
                done[out.request_id] = out
    assert victim not in done and eng.rounds.pending.get(victim) is None
    for rid, r in zip(ids, ref):
        if rid != victim:
            assert done[rid].token_ids == r.token_ids  # R-B2: greedy output unchanged by the abort
    assert not eng.scheduler.running and len(eng.scheduler.free_slots) == SMALL["max_seqs_per_batch"]


@pytest.mark.bundled
def test_stop_string_completed_by_a_long_token_with_the_bundled_tokenizer(tiny_llama_dir):
    from adaspec.models.loader import resolve_model
    from adaspec.models.tokenizer import Tokenizer

    eng = LLM(str(tiny_llama_dir), **SMALL).engine
    eng.tokenizer = tok = Tokenizer(resolve_model(None))  # the real SmolLM2 tokenizer
    long_ws = 1927  # "\n" + 19 spaces: one 20-character token of the bundled vocabulary
    assert tok.decode([long_ws]) == "\n" + " " * 19
    body = tok.encode("x = 1 if y else end")
    req = eng.make_request([5, 6, 7], SamplingParams(stop=["end\n"], max_tokens=64))
    eng._append_tokens(req, body + [long_ws] + tok.encode(" more words"))
    assert req.finish_reason == "stop"
    assert req.output_token_ids[-1] == long_ws  # stopped on the token that completed "end\n"
    text = tok.decode(req.output_token_ids)
    assert text[: req.stop_text_end] == "x = 1 if y else "
    # a stop string inside earlier text is still found exactly once, at its first position
    req2 = eng.make_request([5, 6, 7], SamplingParams(stop=["else"], max_tokens=64))
    eng._append_tokens(req2, body)
    assert req2.finish_reason == "stop" and tok.decode(req2.output_token_ids)[: req2.stop_text_end] == "x = 1 if y "


def test_async_adaptive_verify_with_more_requests_than_the_largest_bucket(tiny_llama_dir, reference, tmp_path):
    params, ref = reference
    cal = tmp_path / "verify.json"
    cal.write_text(json.dumps({**CAL, "request_buckets": [1, 2]}))
    llm = LLM(str(tiny_llama_dir), drafter=ReplayDrafter([o.prompt_token_ids + o.token_ids for o in ref], max_steps=7),
              speculative_algorithm="DSpark", num_speculative_tokens=5, enable_adaptive_target_verify=True,
              enable_schedule_overlap=True, graph_decode_batch_sizes=(1, 2),
              adaptive_target_verify_calibration=str(cal), **SMALL)
    outs = llm.generate(PROMPTS, params)  # 4 decoding requests, largest prepared bucket 2
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
    reasons = [d.reason for d in llm.engine.control.verify.decisions]
    assert any("no prepared request bucket covers" in r for r in reasons)


def _no_engine(monkeypatch):
    def refuse(self, *a, **k):
        raise AssertionError("model work started before the refusal")

    monkeypatch.setattr(LLMEngine, "__init__", refuse)


def _hide_matplotlib(monkeypatch):
    from adaspec.calibration import plot

    def missing():
        raise plot.PlotUnavailableError("plotting the cost fit needs matplotlib, which is not installed; "
                                        "install it with: pip install 'adaspec[plot]'")

    monkeypatch.setattr(plot, "_matplotlib", missing)


def test_calibrate_refuses_an_explicit_plot_without_matplotlib_before_model_work(monkeypatch, capsys, tmp_path):
    from adaspec.cli import main

    _hide_matplotlib(monkeypatch)
    _no_engine(monkeypatch)
    flags = ["--speculative_algorithm=DSpark", "--num_speculative_tokens=5", "--enable_adaptive_target_verify=true"]
    assert main(["calibrate", *flags, f"--plot={tmp_path / 'fit.png'}"]) == 2
    err = capsys.readouterr().err
    assert "--plot=" in err and "pip install 'adaspec[plot]'" in err and "Traceback" not in err


def test_calibrate_default_plot_is_skipped_up_front_without_matplotlib(tiny_llama_dir, draft_dir, monkeypatch, capsys,  # noqa: F811
                                                                     tmp_path):
    from adaspec.cli import main

    _hide_matplotlib(monkeypatch)
    cal = tmp_path / "verify.json"
    cal.write_text(json.dumps({**CAL, "request_buckets": [1]}))
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", f"--model={tiny_llama_dir}", "--speculative_algorithm=DSpark", "--num_speculative_tokens=5",
                 "--enable_adaptive_target_verify=true", "--max_seqs_per_batch=1", "--max_num_batched_tokens=32",
                 "--max_model_len=320", "--graph_decode_batch_sizes=1", f"--draft_model={draft_dir}",
                 f"--adaptive_target_verify_calibration={cal}"]) == 0
    out = capsys.readouterr()
    assert "no plot is drawn" in out.err and '"model"' in out.out and not (tmp_path / "calibration.png").exists()




def test_serve_checks_the_cost_table_output_path_before_model_work(monkeypatch, capsys, tmp_path):
    from adaspec.cli import main

    _no_engine(monkeypatch)
    existing = tmp_path / "table.json"
    existing.write_text("{}")
    flags = ["--speculative_algorithm=DSpark", "--num_speculative_tokens=7", "--enable_adaptive_target_verify=true"]
    assert main(["serve", "--port=0", *flags, f"--adaptive_target_verify_cost_table_output={existing}"]) == 2
    assert "already exists" in capsys.readouterr().err
    missing_dir = tmp_path / "nope" / "table.json"
    assert main(["serve", "--port=0", *flags, f"--adaptive_target_verify_cost_table_output={missing_dir}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "cal.json"
    bad.write_text("{not json")
    assert main(["serve", "--port=0", *flags, f"--adaptive_target_verify_calibration={bad}"]) == 2
    assert "adaptive_target_verify_calibration" in capsys.readouterr().err
