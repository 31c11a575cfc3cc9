"""`adaspec generate` gives the engine one request slot per prompt when it has fewer prompts than
--max_seqs_per_batch (issue 13: start-up calibration only measures the request buckets a run can
use), keeps the slots when a flag or file names the geometry, and its outputs do not change."""

from __future__ import annotations

import json

import pytest

from adaspec.cli import main
from adaspec.commands.generate import slots_for_prompts
from adaspec.config import EngineConfig


def test_fewer_prompts_than_slots_get_one_slot_each():
    slots, note = slots_for_prompts(EngineConfig().validate(), 3)
    assert slots == 3
    assert "3 prompts" in note and "--max_seqs_per_batch=16" in note


@pytest.mark.parametrize("prompts", [16, 40])
def test_as_many_prompts_as_slots_keep_the_slots(prompts):
    assert slots_for_prompts(EngineConfig().validate(), prompts) == (None, None)


@pytest.mark.parametrize("field, value", [
    ("graph_decode_batch_sizes", (1, 4, 16)),
    ("adaptive_target_verify_calibration", "cal.json"),
    ("adaptive_draft_step_config", "step.json"),
    ("adaptive_target_verify_cost_table", "table.json"),
    ("adaptive_target_verify_cost_table_output", "out.json"),
])
def test_a_named_geometry_or_cost_file_keeps_the_slots(field, value):
    assert slots_for_prompts(EngineConfig(**{field: value}), 1) == (None, None)


def test_generate_runs_the_capped_engine(capsys, monkeypatch):
    """The bundled model and its shipped draft: preflight passes, the engine is built with 2 slots."""
    import adaspec.engine.llm_engine as eng

    seen = {}

    def fake_llm(checked):  # stands in for loading: record the engine's config, stop there
        seen["slots"] = checked.config.max_seqs_per_batch
        raise KeyboardInterrupt  # main reports an interrupted run and returns

    monkeypatch.setattr(eng, "LLM", fake_llm)
    main(["generate", "--prompt=a", "--prompt=b", "--speculative_algorithm=MTP", "--enable_adaptive_draft_step=true",
          "--chat=false"])
    assert seen["slots"] == 2
    assert "2 prompts: the engine runs 2 request slots" in capsys.readouterr().err


def test_outputs_do_not_depend_on_the_slot_count(tiny_llama_dir, capsys):
    """R-B5: one prompt on its one slot gives the tokens it gets among 16 slots."""
    common = ["generate", f"--model={tiny_llama_dir}", "--prompt=the cat", "--max_tokens=12", "--json",
              "--chat=false"]
    outs = []
    for extra in ([], ["--graph_decode_batch_sizes=1,4,16"]):  # the flag keeps all 16 slots
        assert main(common + extra) == 0
        outs.append(json.loads(capsys.readouterr().out)["outputs"][0]["token_ids"])
    assert len(outs[0]) == 12 and outs[0] == outs[1]


def test_the_geometry_note_at_one_slot_says_what_is_prepared():
    from adaspec.geometry import choose_prepared

    geo, why = choose_prepared(1, 7, "cpu")
    assert geo.request_buckets == (1,) and "request buckets [1] (all of them, for 1 request slot)" in why
    assert "instead of [1]" not in why  # only the row ladder is sparser than the dense geometry
    geo, why = choose_prepared(1, 3, "cpu", step_mode=True)
    assert geo.request_buckets == (1,) and why is None  # k = 0..3 at bucket 1 is the dense geometry
