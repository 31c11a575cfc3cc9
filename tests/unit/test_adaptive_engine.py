"""Adaptive modes end to end in the engine, on a tiny target with a replay drafter.

- R-B2 / issue 5: greedy output equals plain greedy for adaptive draft step, adaptive verify
  sync and async, with and without schedule overlap, with staggered arrivals, on the fp32 and the
  fp16w linear backend (issue 14; plain and adaptive engines share the backend).
- R-F2 / R-F7: start-up calibration drives real rounds, logs the effective configuration, and
  installs a table; R-G1 / R-G2: a saved table lets the next start skip sampling.
- R-E3: temperature > 0 under the unified layout is refused before execution.
"""

from __future__ import annotations

import json

import pytest

from adaspec.engine.llm_engine import LLM, RequestError
from adaspec.sampling_params import SamplingParams
from replay_drafter import ReplayDrafter
from small_calibration import CAL, calibration_files, install_cheap_costs
from staggered import run_staggered

PROMPTS = ["Hello there", "a", "The quick brown fox jumps", "1 2 3 4 5 6 7 8 9 10 11 12", "xyz xyz", "Q?"]


@pytest.fixture(scope="module")
def plain(tiny_llama_dir, linear_backend):
    llm = LLM(str(tiny_llama_dir), max_seqs_per_batch=4, max_num_batched_tokens=32, max_model_len=320,
              linear_backend=linear_backend)
    params = [SamplingParams(temperature=0, max_tokens=5 + 3 * i, ignore_eos=True) for i in range(len(PROMPTS))]
    return params, llm.generate(PROMPTS, params)


@pytest.fixture(scope="module")
def cal_files(tmp_path_factory):
    return calibration_files(tmp_path_factory.mktemp("cal"))


def _engine(tiny_llama_dir, references, **flags):
    return LLM(str(tiny_llama_dir), drafter=ReplayDrafter(references, max_steps=7), max_seqs_per_batch=4,
               max_num_batched_tokens=32, max_model_len=320, graph_decode_batch_sizes=(1, 2, 4), **flags)


def _mode_flags(mode: str, cal_files) -> dict:
    """The mode's switches plus the small calibration file that fits it."""
    flags = dict(MODES[mode])
    if flags.get("enable_adaptive_draft_step"):
        flags["adaptive_draft_step_config"] = str(cal_files[1])
    else:
        flags["adaptive_target_verify_calibration"] = str(cal_files[0])
    return flags


MODES = {
    "draft_step": dict(speculative_algorithm="MTP", num_speculative_tokens=3, enable_adaptive_draft_step=True),
    "draft_step_overlap": dict(speculative_algorithm="MTP", num_speculative_tokens=3, enable_adaptive_draft_step=True,
                               enable_schedule_overlap=True),
    "verify_sync": dict(speculative_algorithm="DSpark", num_speculative_tokens=5, enable_adaptive_target_verify=True),
    "verify_async": dict(speculative_algorithm="DSpark", num_speculative_tokens=7, enable_adaptive_target_verify=True,
                         enable_schedule_overlap=True),
    "mtp_verify_async": dict(speculative_algorithm="MTP", num_speculative_tokens=5, enable_adaptive_target_verify=True,
                             enable_schedule_overlap=True),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_adaptive_greedy_equals_plain_with_staggered_arrivals(tiny_llama_dir, plain, linear_backend, cal_files, mode,
                                                             capsys):
    params, ref = plain
    flags = _mode_flags(mode, cal_files)
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **flags)
    err = capsys.readouterr().err
    assert f"{flags['speculative_algorithm']} adaptive effective configuration" in err  # R-F7
    assert "greedy" in err  # the table excludes random-sampling cost, and says so (R-F2)
    eng = llm.engine
    done = run_staggered(eng, PROMPTS, params)
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids, (mode, i)
    summary = eng.control.summary()
    assert sum(next(iter(summary.values())).values()) > 0  # the controller made decisions


def test_confidence_stop_is_lossless_and_verifies_less(tiny_llama_dir, plain, linear_backend, tmp_path):
    """policy.confidence_stop (adaptive/step_policy.py): a request's drafts are verified up to the first whose path
    probability falls below the threshold, decided from the draft's own scores only, so greedy output still equals
    plain (R-B2); with the replay drafter's 0.3 / 0.8 scores some rounds verify fewer than k drafts."""
    params, ref = plain
    config = tmp_path / "step.json"
    config.write_text(json.dumps({"version": 1, "policy": {"window_size": 4, "update_interval": 2,
                                                           "confidence_stop": 0.5, "ceiling_pricing": True},
                                  "calibration": CAL}))
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  speculative_algorithm="MTP", num_speculative_tokens=3, enable_adaptive_draft_step=True,
                  adaptive_draft_step_config=str(config))
    eng = llm.engine
    assert eng.control.step.policy.confidence_stop == 0.5
    install_cheap_costs(eng)  # speculation pays: the controller drafts deep whatever this machine's timing
    verified, seen = [], []
    run = eng.rounds.run
    eng.rounds.run = lambda chunks, plan: verified.append((plan, r := run(chunks, plan))) or r
    depth = eng.control.step.depth.observe
    eng.control.step.depth.observe = lambda lens, caps: seen.append((list(lens), list(caps))) or depth(lens, caps)
    outs = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
    drafting = [(p, r) for p, r in verified if p.num_steps >= 2]
    assert drafting and all(p.stop_below == 0.5 for p, _ in drafting)
    # the stop cut some request's verify below both its cap and k, and never verified past the cap
    assert any(L < min(c, p.num_steps) for p, r in drafting for L, c in zip(r.verify_lens, p.verify_lens))
    assert all(L <= c for p, r in drafting for L, c in zip(r.verify_lens, p.verify_lens))
    # the controller was told each request's ceiling (its cap), stops included, for ceiling pricing (step_depth.py)
    # (the last round's result is released to the controller only when a next round is planned: none is)
    seen = [(lens, caps) for lens, caps in seen if any(lens)]
    drafted = [(list(r.verify_lens), list(p.verify_lens)) for p, r in verified if any(r.verify_lens)]
    assert seen == drafted[:len(seen)] and len(seen) >= len(drafted) - 1
    assert any(L < c for lens, caps in seen for L, c in zip(lens, caps))


def test_saved_table_skips_calibration(tiny_llama_dir, plain, linear_backend, cal_files, tmp_path, capsys):
    params, ref = plain
    refs = [o.prompt_token_ids + o.token_ids for o in ref]
    out = tmp_path / "dspark-costs.json"
    flags = dict(MODES["verify_sync"], adaptive_target_verify_calibration=str(cal_files[0]),
                 adaptive_target_verify_cost_table_output=str(out), linear_backend=linear_backend)
    _engine(tiny_llama_dir, refs, **flags)
    assert out.exists()
    capsys.readouterr()
    import adaspec.engine.control_startup as control  # where start-up calls measure()

    calls = []
    real = control.measure
    control.measure = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        llm = _engine(tiny_llama_dir, refs, **MODES["verify_sync"], adaptive_target_verify_cost_table=str(out),
                      linear_backend=linear_backend)
    finally:
        control.measure = real
    assert not calls  # loading a table skips sampling and fitting (warm-up still runs)
    err = capsys.readouterr().err
    assert "warm-up" in err and "saved table" in err
    outs = llm.generate(PROMPTS[:3], params[:3])
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref[:3]]
    with pytest.raises(Exception, match="exist"):  # never overwrite (R-G1)
        _engine(tiny_llama_dir, refs, **flags)


def test_table_from_another_host_loads_with_a_warning(tiny_llama_dir, plain, linear_backend, cal_files, tmp_path,
                                                     capsys):
    """A table records where it was measured (calibration/host.py); one measured with other threads or on
    another processor is compatible (R-G3) but its costs may not hold here: loading it says so in one
    line naming the difference and the flag, and still serves exactly. The same host: no warning."""
    import torch

    params, ref = plain
    refs = [o.prompt_token_ids + o.token_ids for o in ref]
    out = tmp_path / "costs.json"
    _engine(tiny_llama_dir, refs, **MODES["verify_sync"], adaptive_target_verify_calibration=str(cal_files[0]),
            adaptive_target_verify_cost_table_output=str(out), linear_backend=linear_backend)
    data = json.loads(out.read_text())
    host = data["metadata"]["host"]
    assert host["threads"] == torch.get_num_threads() and host["processor"] and host["torch"] == torch.__version__
    capsys.readouterr()
    _engine(tiny_llama_dir, refs, **MODES["verify_sync"], adaptive_target_verify_cost_table=str(out),
            linear_backend=linear_backend)
    assert "another host" not in capsys.readouterr().err
    data["metadata"]["host"] = {**host, "threads": host["threads"] + 3, "processor": "Some Other CPU"}
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(data))
    llm = _engine(tiny_llama_dir, refs, **MODES["verify_sync"], adaptive_target_verify_cost_table=str(moved),
                  linear_backend=linear_backend)
    lines = [line for line in capsys.readouterr().err.splitlines() if "another host" in line]
    assert len(lines) == 1, lines
    assert f"threads {host['threads'] + 3} (table) vs {host['threads']} (here)" in lines[0]
    assert "'Some Other CPU' (table)" in lines[0] and "--adaptive_target_verify_cost_table" in lines[0]
    assert "torch '" not in lines[0]  # only what differs is named
    outs = llm.generate(PROMPTS[:2], params[:2])
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref[:2]]


def test_unified_refuses_random_requests_before_execution(tiny_llama_dir, cal_files):
    llm = _engine(tiny_llama_dir, [], **MODES["verify_sync"], enable_unified_mtp_graph=True,
                  adaptive_target_verify_calibration=str(cal_files[0]))
    with pytest.raises(RequestError, match="temperature"):
        llm.generate(["hi"], SamplingParams(temperature=0.7))
    assert not llm.engine.has_unfinished()
    assert llm.generate(["hi"], SamplingParams(temperature=0, max_tokens=2))[0].finish_reason is not None


@pytest.mark.parametrize("mode", ["verify_sync", "verify_async", "draft_step"])
def test_mixed_greedy_and_random_batch(tiny_llama_dir, plain, linear_backend, cal_files, mode):
    """R-B3: greedy and random requests share adaptive rounds; greedy ones stay exact."""
    params, ref = plain
    flags = _mode_flags(mode, cal_files)
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **flags)
    random = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, min_p=0.02, max_tokens=10, ignore_eos=True)
    mixed = [params[i] if i % 2 == 0 else random for i in range(len(PROMPTS))]
    outs = llm.generate(PROMPTS, mixed)
    for i, o in enumerate(outs):
        if i % 2 == 0:
            assert o.token_ids == ref[i].token_ids
        else:
            assert len(o.token_ids) == 10 and o.finish_reason == "length"


def test_table_from_another_linear_backend_is_refused(tiny_llama_dir, cal_files, tmp_path):
    """Issue 14 / R-G3: the linear backend is part of the target's identity; an fp32 table never
    serves fp16w (or the reverse), and the message names both backends and the flag."""
    from adaspec.calibration.cost_table import CostTableCompatibilityError
    from adaspec.models.linear import unavailable_reason

    if unavailable_reason("fp16w"):
        pytest.skip("fp16w unavailable here")
    out = tmp_path / "fp32-costs.json"
    _engine(tiny_llama_dir, [], **MODES["verify_sync"], adaptive_target_verify_calibration=str(cal_files[0]),
            adaptive_target_verify_cost_table_output=str(out), linear_backend="fp32")
    assert json.loads(out.read_text())["metadata"]["linear_backend"] == "fp32"
    with pytest.raises(CostTableCompatibilityError) as e:
        _engine(tiny_llama_dir, [], **MODES["verify_sync"], adaptive_target_verify_cost_table=str(out),
                linear_backend="fp16w")
    assert e.value.fields == ["linear_backend"]
    assert "linear_backend: table 'fp32', engine 'fp16w'" in str(e.value)
    assert "--linear_backend=fp32" in str(e.value)


def test_table_from_other_layer_kernels_is_refused(tiny_llama_dir, cal_files, tmp_path):
    """Issue 14 / R-G3: --layer_kernels is part of the target's identity too: a table measured on
    torch's ops never serves the native kernels; the message names both and the flag."""
    from adaspec.calibration.cost_table import CostTableCompatibilityError
    from adaspec.models.native_kernels import kernels

    if isinstance(kernels(), str):
        pytest.skip(f"native layer kernels unavailable here: {kernels()}")
    out = tmp_path / "torch-costs.json"
    _engine(tiny_llama_dir, [], **MODES["verify_sync"], adaptive_target_verify_calibration=str(cal_files[0]),
            adaptive_target_verify_cost_table_output=str(out), layer_kernels="torch")
    assert json.loads(out.read_text())["metadata"]["layer_kernels"] == "torch"
    with pytest.raises(CostTableCompatibilityError) as e:
        _engine(tiny_llama_dir, [], **MODES["verify_sync"], adaptive_target_verify_cost_table=str(out),
                layer_kernels="native")
    assert e.value.fields == ["layer_kernels"]
    assert "layer_kernels: table 'torch', engine 'native'" in str(e.value)
    assert "--layer_kernels=torch" in str(e.value)


@pytest.mark.parametrize("overlap", [False, True])
def test_cost_checks_and_served_pricing_are_lossless(tiny_llama_dir, plain, linear_backend, cal_files, monkeypatch,
                                                     overlap):
    """The draft step's served pricing (adaptive/step_served.py, issue 13): the engine hands every round's served time
    to the controller, and the plain rounds it runs inside a k = 1 stretch to time it (cost checks, here forced every
    other batch) leave greedy output equal to plain (R-B2), with and without schedule overlap."""
    from adaspec.adaptive import step_served

    monkeypatch.setattr(step_served, "CHECK_MARGIN", 1e9)  # every k = 1 counts as marginal
    monkeypatch.setattr(step_served, "CHECK_EVERY", 2)
    params, ref = plain
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  speculative_algorithm="MTP", num_speculative_tokens=1, enable_adaptive_draft_step=True,
                  adaptive_draft_step_config=str(cal_files[1]), enable_schedule_overlap=overlap)
    eng = llm.engine
    install_cheap_costs(eng)  # k = 1 pays on the table, whatever this machine's timing
    plans = []
    run = eng.rounds.run
    eng.rounds.run = lambda chunks, plan: plans.append(plan) or run(chunks, plan)
    done = run_staggered(eng, PROMPTS, params)
    assert [d.token_ids for d in done] == [r.token_ids for r in ref]
    step = eng.control.step
    checks = [p for p in plans if p.cost_check]
    assert step.cost_checks == len(checks) > 0 and all(p.num_steps == 0 for p in checks)
    assert any(p.num_steps == 1 for p in plans)
    assert step.served.last_round == eng.round_id  # every round's time reached the controller
    assert eng.control.summary()["cost_checks"] == step.cost_checks
