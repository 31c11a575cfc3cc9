"""Flags and refusals of the Suffix and MTP+Suffix drafts (issue 10), and their cost tables (R-G3).

Every rule names the flag and the fix, before any model work (EngineConfig.validate, the CLI); the
adaptive switches accept the new algorithms; a Suffix cost table never serves MTP+Suffix (or MTP),
and the reverse.
"""

from __future__ import annotations

import json

import pytest
import torch

from adaspec.config import ConfigError, EngineConfig
from refusal import refused

SUFFIX = dict(speculative_algorithm="Suffix")

REFUSALS = [
    (dict(SUFFIX, suffix_global_cache=-1), "--suffix_global_cache=-1: must be between 0 and 4096"),
    (dict(SUFFIX, suffix_global_cache=5000), "--suffix_global_cache=5000: must be between 0 and 4096"),
    (dict(suffix_global_cache=8), "--suffix_global_cache=8 needs --speculative_algorithm=Suffix or MTP+Suffix"),
    (dict(speculative_algorithm="MTP", suffix_global_cache=8), "needs --speculative_algorithm=Suffix or MTP+Suffix"),
    (dict(SUFFIX, suffix_global_cache=True), "--suffix_global_cache=True: expected an integer"),
    (dict(SUFFIX, draft_model="/some/dir"), "--draft_model is not used by --speculative_algorithm=Suffix"),
    (dict(SUFFIX, num_speculative_tokens=17), "--num_speculative_tokens=17: Suffix proposes at most 16"),
    (dict(speculative_algorithm="MTP+Suffix", num_speculative_tokens=0), "--num_speculative_tokens=0: must be >= 1"),
    (dict(SUFFIX, enable_unified_mtp_graph=True), "set --enable_unified_mtp_graph=false"),
    (dict(SUFFIX, num_speculative_tokens=4, enable_adaptive_target_verify=True), "--num_speculative_tokens=5 or 7"),
    (dict(speculative_algorithm="Sufix"), "--speculative_algorithm=Sufix: allowed values are none, MTP, DSpark, "
                                          "Suffix, MTP+Suffix"),
]


@pytest.mark.parametrize("flags, message", REFUSALS)
def test_refusals_name_the_flag(flags, message):
    with pytest.raises(ConfigError) as e:
        EngineConfig(**flags).validate()
    assert message in str(e.value)
    assert e.value.param and e.value.param in str(e.value)


@pytest.mark.parametrize("flags", [
    dict(SUFFIX), dict(SUFFIX, suffix_global_cache=16), dict(SUFFIX, num_speculative_tokens=16),
    dict(SUFFIX, enable_adaptive_draft_step=True), dict(SUFFIX, num_speculative_tokens=7,
                                                        enable_adaptive_target_verify=True),
    dict(speculative_algorithm="MTP+Suffix", enable_adaptive_draft_step=True, suffix_global_cache=1),
    dict(speculative_algorithm="MTP+Suffix", num_speculative_tokens=5, enable_adaptive_target_verify=True,
         enable_schedule_overlap=True),
])
def test_accepted_combinations(flags):
    cfg = EngineConfig(**flags).validate()
    assert cfg.speculative and cfg.num_draft_tokens >= 1


def test_default_widths():
    assert EngineConfig(**SUFFIX).num_draft_tokens == 5
    assert EngineConfig(speculative_algorithm="MTP+Suffix").num_draft_tokens == 3


def test_cli_refuses_before_model_work(capsys, monkeypatch):
    refused(["generate", "--prompt=hi", "--speculative_algorithm=Suffix", "--suffix_global_cache=-3"], capsys,
            monkeypatch, "--suffix_global_cache")
    refused(["generate", "--prompt=hi", "--suffix_global_cache=2"], capsys, monkeypatch, "--suffix_global_cache",
            contains=["--speculative_algorithm=Suffix or MTP+Suffix"])


def test_suffix_cost_table_never_serves_mtp_suffix_and_back(tiny_llama_dir, tmp_path):
    """R-G3: the algorithm (and the draft fingerprint) is part of a table's identity."""
    from adaspec.calibration.cost_table import CostTableCompatibilityError
    from adaspec.drafts.factory import build_draft
    from adaspec.drafts.hybrid import MTPSuffixDrafter
    from adaspec.engine.llm_engine import LLM
    from adaspec.models.loader import load_model

    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"request_buckets": [1, 2], "contexts": [{"prefill_tokens": 8, "min_kv_length": 1,
                                                                         "max_kv_length": 100}],
                               "warmup_steps": 1, "window_steps": 1, "windows_per_point": 1}))
    common = dict(max_seqs_per_batch=2, max_num_batched_tokens=32, max_model_len=128, graph_decode_batch_sizes=(1, 2),
                  num_speculative_tokens=5, enable_adaptive_target_verify=True)
    suffix_table, hybrid_table = tmp_path / "suffix.json", tmp_path / "hybrid.json"
    LLM(str(tiny_llama_dir), speculative_algorithm="Suffix", adaptive_target_verify_calibration=str(cal),
        adaptive_target_verify_cost_table_output=str(suffix_table), **common)
    meta = json.loads(suffix_table.read_text())["metadata"]
    assert meta["algorithm"] == "Suffix" and meta["weights_fingerprint"].endswith("+draft:suffix:v1:ngram2-8")

    cfg, model = load_model(tiny_llama_dir, torch.float32, "cpu")

    def hybrid():
        d2t = torch.arange(96)
        return MTPSuffixDrafter(build_draft("mtp", cfg, d2t).init_from_target(model).eval().requires_grad_(False))

    with pytest.raises(CostTableCompatibilityError) as e:
        LLM(str(tiny_llama_dir), drafter=hybrid(), speculative_algorithm="MTP+Suffix",
            adaptive_target_verify_cost_table=str(suffix_table), **common)
    assert "algorithm" in e.value.fields and "--speculative_algorithm=Suffix" in str(e.value)
    LLM(str(tiny_llama_dir), drafter=hybrid(), speculative_algorithm="MTP+Suffix",
        adaptive_target_verify_calibration=str(cal), adaptive_target_verify_cost_table_output=str(hybrid_table),
        **common)
    with pytest.raises(CostTableCompatibilityError) as e:
        LLM(str(tiny_llama_dir), speculative_algorithm="Suffix", adaptive_target_verify_cost_table=str(hybrid_table),
            **common)
    assert "algorithm" in e.value.fields


def test_generate_json_reports_the_drafters_time(tiny_llama_dir, capsys):
    """The Suffix draft's host time per run is reported (`--json` stats), next to the acceptance."""
    from adaspec.cli import main

    rc = main(["generate", f"--model={tiny_llama_dir}", "--prompt=a b c a b c a b", "--chat=false", "--max_tokens=12",
               "--speculative_algorithm=Suffix", "--num_speculative_tokens=4", "--json"])
    assert rc == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    assert stats["drafter"]["draft_calls"] > 0 and 0 <= stats["drafter"]["draft_host_share"] < 1
