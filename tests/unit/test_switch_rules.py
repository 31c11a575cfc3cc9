"""Switch rules (R-B4, R-D6, R-E1..R-E4), all from one validation place, each naming the flag.

Refused at start-up means a non-zero exit before any model work, from every entry point.
"""

from __future__ import annotations

import pytest

from adaspec.cli import main
from adaspec.config import ConfigError, EngineConfig

MTP = dict(speculative_algorithm="MTP", num_speculative_tokens=5)
DSPARK = dict(speculative_algorithm="DSpark", num_speculative_tokens=7)

REFUSALS = [
    # R-E1: both switches together
    (dict(MTP, enable_adaptive_draft_step=True, enable_adaptive_target_verify=True), "cannot be combined"),
    # R-E2: adaptive draft step requires MTP
    (dict(DSPARK, enable_adaptive_draft_step=True), "--enable_adaptive_draft_step=true requires --speculative_algorithm=MTP"),
    (dict(enable_adaptive_draft_step=True), "--speculative_algorithm=MTP"),
    # R-E2: adaptive verify requires MTP or DSpark with width 5 or 7
    (dict(enable_adaptive_target_verify=True), "--speculative_algorithm=MTP, DSpark, Suffix or MTP+Suffix"),
    (dict(speculative_algorithm="MTP", num_speculative_tokens=3, enable_adaptive_target_verify=True),
     "--num_speculative_tokens=5 or 7"),
    # R-E3: unified with adaptive draft step, unified with DP > 1
    (dict(MTP, enable_adaptive_draft_step=True, enable_unified_mtp_graph=True), "--enable_unified_mtp_graph=false"),
    (dict(DSPARK, enable_unified_mtp_graph=True, dp_size=2), "--dp_size"),
    # R-E4: adaptive modes need prepared shapes and warm-up
    (dict(DSPARK, enable_adaptive_target_verify=True, enable_graph=False), "--enable_graph=true"),
    (dict(MTP, enable_adaptive_draft_step=True, disable_graph_warmup=True), "--disable_graph_warmup=false"),
    # R-B4: the draft stays greedy
    (dict(MTP, enable_probabilistic_draft=True), "--enable_probabilistic_draft"),
    # R-C3: precomputed step costs are not supported for adaptive draft step
    (dict(MTP, enable_adaptive_draft_step=True, adaptive_target_verify_cost_table="t.json"), "R-C3"),
    # options that need their switch
    (dict(DSPARK, adaptive_target_verify_calibration="c.json"), "--enable_adaptive_target_verify=true"),
    (dict(MTP, adaptive_draft_step_config="c.json"), "--enable_adaptive_draft_step=true"),
]


@pytest.mark.parametrize("flags, message", REFUSALS)
def test_refusal_names_the_flag(flags, message):
    with pytest.raises(ConfigError) as e:
        EngineConfig(**flags).validate()
    assert message in str(e.value)


def test_switches_default_false_and_static_path_has_no_control():
    """R-E1, R-E5: both off by default; nothing adaptive is built."""
    cfg = EngineConfig().validate()
    assert not cfg.enable_adaptive_draft_step and not cfg.enable_adaptive_target_verify and not cfg.adaptive


def _argv(flags: dict) -> list[str]:
    out = []
    for k, v in flags.items():
        out.append(f"--{k}={str(v).lower() if isinstance(v, bool) else v}")
    return out


@pytest.mark.parametrize("command", ["generate", "calibrate"])
@pytest.mark.parametrize("flags, message", REFUSALS[:6])
def test_every_entry_point_refuses_before_model_work(command, flags, message, capsys, monkeypatch):
    import adaspec.engine.llm_engine as eng

    monkeypatch.setattr(eng.LLMEngine, "__init__", lambda *a, **k: pytest.fail("model work started"))
    argv = [command] + (["--prompt=x"] if command == "generate" else []) + _argv(flags)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("old", ["enable_adaptive_spec_prune", "enable_adaptive_speculative_decode"])
def test_old_switch_names_are_not_aliases(old, capsys):
    """R-D6: the CLI names the new switch."""
    assert main(["generate", "--prompt=x", f"--{old}=true"]) == 2
    assert "enable_adaptive_target_verify" in capsys.readouterr().err


def test_static_path_does_no_calibration_or_warmup(tiny_llama_dir, monkeypatch):
    """R-E5: with both switches off, start-up runs no warm-up, calibration or profiling."""
    import adaspec.engine.calibrate as cal
    from adaspec.engine.llm_engine import LLM
    from replay_drafter import ReplayDrafter

    monkeypatch.setattr(cal, "measure", lambda *a, **k: pytest.fail("calibration ran"))
    monkeypatch.setattr(cal, "warm_up", lambda *a, **k: pytest.fail("warm-up ran"))
    for flags in ({}, dict(MTP)):
        drafter = ReplayDrafter([], max_steps=5) if flags else None
        llm = LLM(str(tiny_llama_dir), drafter=drafter, **flags)
        assert llm.engine.control is None
