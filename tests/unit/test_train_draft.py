"""`adaspec train-draft` end to end on a tiny random target (R-B6, R-D2).

A handful of prompts, a few optimizer steps: the point is the pipeline (distil -> train ->
calibrate -> report -> save), that its output loads as a Drafter for the target it was made for,
and that an interrupted run resumes from its checkpoint. Quality is measured by the full recipe
(scripts/train_drafts.sh), not here.
"""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from adaspec.drafts.factory import load_drafter
from adaspec.errors import UserError
from adaspec.models.loader import load_model, weights_fingerprint
from adaspec.training.cli import add_train_flags, run_train


def parse(*argv):
    return add_train_flags(argparse.ArgumentParser()).parse_args(list(argv))


def tiny_flags(model_dir, output, data_dir, kind, steps):
    return (
        f"--kind={kind}", f"--model={model_dir}", f"--output={output}", f"--data_dir={data_dir}",
        "--num_prompts=8", "--gen_tokens=20", "--prompt_tokens=24", "--raw_tokens=0", "--gen_batch=4",
        f"--steps={steps}", "--batch_size=3", "--draft_vocab=64", "--width=5", "--rank=8", "--seed=3",
    )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("draft_data")  # shared by every run below: distilled once


@pytest.mark.parametrize("kind", ["mtp", "dspark"])
def test_smoke_run_makes_a_loadable_draft_and_report(kind, tiny_llama_dir, data_dir, tmp_path):
    out = tmp_path / kind
    report = run_train(parse(*tiny_flags(tiny_llama_dir, out, data_dir, kind, 3)))
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["kind"] == kind and on_disk["training"]["steps"] == 3
    overall = on_disk["eval"]["overall"]
    assert overall["anchors"] > 0 and len(overall["conditional_acceptance"]) == 5
    assert 1.0 <= overall["mean_acceptance_length"] <= 6.0
    if kind == "dspark":
        cal = on_disk["calibration"]
        assert len(cal["temperatures"]) == 5 and len(cal["ece_before"]) == len(cal["ece_after"]) == 5
    assert report["kind"] == kind
    cfg, model = load_model(tiny_llama_dir, torch.float32, "cpu")
    draft = load_drafter(out, kind, model, cfg, "cpu", torch.float32, target_fingerprint=weights_fingerprint(tiny_llama_dir))
    assert draft.kind == kind
    config = json.loads((out / "config.json").read_text())
    assert config["recipe"]["command"].startswith("adaspec train-draft") and config["report"]["kind"] == kind
    if kind == "dspark":  # the calibrated temperatures travel with the draft
        assert draft.conf_temp.tolist() == pytest.approx(on_disk["calibration"]["temperatures"], rel=1e-3)


def test_rerun_resumes_from_the_checkpoint(tiny_llama_dir, data_dir, tmp_path, capsys):
    out = tmp_path / "resume"
    run_train(parse(*tiny_flags(tiny_llama_dir, out, data_dir, "mtp", 2)))
    first = torch.load(out / "checkpoint.pt", weights_only=False)
    assert first["step"] == 2
    capsys.readouterr()
    report = run_train(parse(*tiny_flags(tiny_llama_dir, out, data_dir, "mtp", 4)))
    assert "resuming from" in capsys.readouterr().out
    assert report["training"]["steps"] == 4
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 4
    # a checkpoint of another architecture is not silently reused (refused before the target loads)
    with pytest.raises(UserError, match="another run"):
        run_train(parse(*tiny_flags(tiny_llama_dir, out, data_dir, "dspark", 5)))


def test_other_data_recipe_in_the_same_data_dir_is_refused(tiny_llama_dir, data_dir, tmp_path):
    flags = list(tiny_flags(tiny_llama_dir, tmp_path / "x", data_dir, "mtp", 1))
    flags[flags.index("--gen_tokens=20")] = "--gen_tokens=21"
    run_train(parse(*tiny_flags(tiny_llama_dir, tmp_path / "y", data_dir, "mtp", 1)))  # data exists
    with pytest.raises(ValueError, match="another recipe"):
        run_train(parse(*flags))


def test_sequential_temperature_scaling_fixes_an_overconfident_head():
    """STS (R-D2 calibration): a head whose logits are 3x too sharp is rescaled per position, the
    ECE of the cumulative product drops, and each position's order is kept (T > 0)."""
    from adaspec.training.evaluate import position_ece, sequential_temperature_scaling

    g = torch.Generator().manual_seed(0)
    z_true = torch.randn(4000, 3, generator=g, dtype=torch.float64) * 1.5 + 1.0
    accepted = torch.bernoulli(torch.sigmoid(z_true), generator=g)
    survive = torch.cumprod(accepted, dim=1)  # S_k: the first k were all accepted
    z = 3 * z_true
    temps = sequential_temperature_scaling(z, survive)
    before, after = position_ece(z, survive, [1.0] * 3), position_ece(z, survive, temps)
    assert all(a < b for a, b in zip(after, before))
    assert 2.0 < temps[0] < 4.5 and all(t > 0 for t in temps)
