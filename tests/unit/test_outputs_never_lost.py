"""No finished result is lost and no half-written file is left when a step fails (R-G1, issue 8).

Failures are injected where they hurt: an interrupt during calibration, a full disk while the
table is written, a plot that fails after the table was written, a training run interrupted, a
full disk while the draft is saved. Afterwards the output directory holds either nothing new or
complete files only (no `.tmp` leftovers), and the command ended with one line (or, for a bug,
its traceback and one line saying it is a bug).
"""

from __future__ import annotations

import errno
import json

import pytest
import torch

from adaspec.cli import main

CAL = {"request_buckets": [1, 2], "contexts": [{"prefill_tokens": 8, "min_kv_length": 1, "max_kv_length": 200}],
       "warmup_steps": 1, "window_steps": 2, "windows_per_point": 1}


@pytest.fixture(scope="module")
def setup(tiny_llama_dir, tmp_path_factory):
    from adaspec.drafts.factory import build_draft, save_draft
    from adaspec.models.loader import load_model, weights_fingerprint

    cfg, target = load_model(tiny_llama_dir, torch.float32, "cpu")
    draft = build_draft("dspark", cfg, torch.arange(cfg.vocab_size), width=5, num_layers=1, rank=8).init_from_target(target)
    d = tmp_path_factory.mktemp("never_lost")
    save_draft(draft, d / "draft", weights_fingerprint(tiny_llama_dir))
    (d / "cal.json").write_text(json.dumps(CAL))
    return d


def calibrate_argv(tiny_llama_dir, setup, out_dir, plot=""):
    return ["calibrate", f"--model={tiny_llama_dir}", "--speculative_algorithm=DSpark", "--num_speculative_tokens=5",
            f"--draft_model={setup / 'draft'}", "--enable_adaptive_target_verify=true", "--max_seqs_per_batch=2",
            "--graph_decode_batch_sizes=1,2", "--max_model_len=256",
            f"--adaptive_target_verify_calibration={setup / 'cal.json'}",
            f"--adaptive_target_verify_cost_table_output={out_dir / 'costs.json'}", f"--plot={plot}"]


def test_interrupted_calibration_writes_nothing(tiny_llama_dir, setup, tmp_path, capsys, monkeypatch):
    import adaspec.engine.control_startup as control  # where start-up calls measure()

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(control, "measure", interrupted)
    assert main(calibrate_argv(tiny_llama_dir, setup, tmp_path)) == 130
    assert "interrupted" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_full_disk_while_saving_leaves_no_partial_table(tiny_llama_dir, setup, tmp_path, capsys, monkeypatch):
    import adaspec.outputs as outputs

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs.os, "fsync", full)
    assert main(calibrate_argv(tiny_llama_dir, setup, tmp_path)) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err  # the machine's problem: one line
    assert list(tmp_path.iterdir()) == []  # neither the table nor a temporary file


def test_failed_plot_keeps_the_finished_table(tiny_llama_dir, setup, tmp_path, capsys, monkeypatch):
    """The table is written as soon as it is fitted; a later failure (here a bug in plotting) does not lose it."""
    from matplotlib.figure import Figure

    from adaspec.calibration.cost_table import CostTable

    def broken(self, *a, **k):
        raise RuntimeError("renderer exploded")

    monkeypatch.setattr(Figure, "savefig", broken)
    assert main(calibrate_argv(tiny_llama_dir, setup, tmp_path, plot=str(tmp_path / "fit.png"))) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "bug in adaspec" in err  # not the user's fault: traceback + one bug line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["costs.json"]  # no partial PNG
    table = CostTable.from_dict(json.loads((tmp_path / "costs.json").read_text()))
    assert table.metadata.algorithm == "DSpark" and table.points


TRAIN = ["--num_prompts=6", "--gen_tokens=12", "--prompt_tokens=16", "--raw_tokens=0", "--gen_batch=3",
         "--batch_size=2", "--draft_vocab=64", "--seed=5"]


@pytest.fixture(scope="module")
def data_dir(tiny_llama_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("train_data")
    out = tmp_path_factory.mktemp("train_out")
    assert main(["train-draft", "--kind=mtp", f"--model={tiny_llama_dir}", f"--output={out}", f"--data_dir={d}",
                 "--data_only=true", *TRAIN]) == 0
    return d


def _train(tiny_llama_dir, data_dir, out):
    return ["train-draft", "--kind=mtp", f"--model={tiny_llama_dir}", f"--output={out}", f"--data_dir={data_dir}",
            "--steps=2", *TRAIN]


def test_interrupted_training_leaves_no_draft(tiny_llama_dir, data_dir, tmp_path, capsys, monkeypatch):
    import adaspec.training.trainer as trainer

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "train", interrupted)
    out = tmp_path / "draft"
    assert main(_train(tiny_llama_dir, data_dir, out)) == 130
    left = {p.name for p in out.iterdir()} if out.exists() else set()
    assert not left & {"config.json", "model.safetensors", "report.json"}, left


def test_full_disk_while_saving_the_draft_leaves_no_partial_file(tiny_llama_dir, data_dir, tmp_path, capsys,
                                                                 monkeypatch):
    import safetensors.torch

    def half_then_full(state, path, *a, **k):
        with open(path, "wb") as f:
            f.write(b"\0" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", half_then_full)
    out = tmp_path / "draft"
    assert main(_train(tiny_llama_dir, data_dir, out)) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err
    left = sorted(p.name for p in out.iterdir())
    assert not [n for n in left if n.endswith(".tmp")], left
    assert "model.safetensors" not in left and "config.json" not in left and "report.json" not in left, left
    # the checkpoint is complete and the rerun resumes from it (nothing was lost)
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 2


def test_bug_keeps_its_traceback_and_says_so(tiny_llama_dir, capsys, monkeypatch):
    import adaspec.commands.generate as generate

    def bug(*a, **k):
        return 1 / 0

    monkeypatch.setattr(generate, "read_prompts", bug)
    assert main(["generate", f"--model={tiny_llama_dir}", "--prompt=hi"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err
    assert err.strip().splitlines()[-1].startswith("adaspec generate: internal error: this is a bug in adaspec")
