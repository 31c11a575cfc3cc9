"""AdaptiveControl.install_table (engine/control.py) and bench/adaptive.py --alt_shares_table: one engine's
controller priced by another engine's measured table, its own policy kept (issue 13: policy A/Bs on one
measurement; stop 50)."""

from __future__ import annotations

import json

import pytest

from adaspec.engine.llm_engine import LLM
from replay_drafter import ReplayDrafter
from small_calibration import CAL, calibration_files

STEP = dict(speculative_algorithm="MTP", num_speculative_tokens=3, enable_adaptive_draft_step=True)


def _engine(tiny_llama_dir, **flags):
    return LLM(str(tiny_llama_dir), drafter=ReplayDrafter([], max_steps=7), max_seqs_per_batch=4,
               max_num_batched_tokens=32, max_model_len=320, graph_decode_batch_sizes=(1, 2, 4), **flags)


def test_a_controller_priced_by_another_engines_table_keeps_its_own_policy(tiny_llama_dir, tmp_path):
    verify_cal, step_cal = calibration_files(tmp_path)
    alt_cal = tmp_path / "alt.json"
    alt_cal.write_text(json.dumps({"version": 1, "policy": {"window_size": 7, "ceiling_pricing": True},
                                   "calibration": CAL}))
    main = _engine(tiny_llama_dir, **STEP, adaptive_draft_step_config=str(step_cal))
    alt = _engine(tiny_llama_dir, **STEP, adaptive_draft_step_config=str(alt_cal))
    ctl, table = alt.engine.control, main.engine.control.table
    assert ctl.table is not table
    ctl.install_table(table)
    assert ctl.table is table and ctl.step.cost_ms == table.cost_ms
    assert ctl.step.policy.window_size == 7 and ctl.step.policy.ceiling_pricing  # alt's own, not main's (4)
    assert main.engine.control.step.policy.window_size == 4
    ctl.reset()  # every later cold start keeps both
    assert ctl.table is table and ctl.step.policy.window_size == 7

    verify = _engine(tiny_llama_dir, speculative_algorithm="DSpark", num_speculative_tokens=5,
                     enable_adaptive_target_verify=True, adaptive_target_verify_calibration=str(verify_cal))
    with pytest.raises(ValueError, match="does not match this engine: .*mode"):
        ctl.install_table(verify.engine.control.table)
    assert ctl.table is table  # refused before anything changed
    for llm in (main, alt, verify):
        llm.close()


@pytest.mark.parametrize("argv, message", [
    (["--alt_shares_table", "--configs=plain,mtp_step"], "add both to --configs"),
    (["--alt_shares_table", "--configs=mtp_step,mtp_step_alt", "--isolate"], "drop --isolate"),
    (["--alt_shares_table", "--configs=mtp_step,mtp_step_alt", "--interleave"], None),
])
def test_alt_shares_table_needs_both_step_engines_in_one_process(argv, message, capsys):
    from bench.adaptive import parse_args

    if message is None:
        assert parse_args(argv).alt_shares_table
        return
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
