"""`adaspec train-draft --kind=both` (issue 11) end to end on a tiny random target.

The pipeline, not quality: answers are generated and stored as token ids only, the teacher runs
inside the training loop, both drafts train on one teacher pass, the learning curve has a point per
eval with held-out acceptance per source, the drafts load as Drafters, and a rerun resumes.
"""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from adaspec.config import ConfigError
from adaspec.drafts.factory import load_drafter
from adaspec.errors import InputFileError
from adaspec.models.loader import load_model, weights_fingerprint
from adaspec.training.cli import add_train_flags, run_train
from adaspec.training.joint import Sampler


def parse(*argv):
    return add_train_flags(argparse.ArgumentParser()).parse_args(list(argv))


def flags(model_dir, tmp_path, positions, **extra):
    base = {
        "kind": "both", "model": model_dir, "output": tmp_path / "drafts", "data_dir": tmp_path / "data",
        "checkpoint": tmp_path / "ckpt.pt", "chat_prompts": 6, "code_prompts": 4, "prose_prompts": 2,
        "gen_tokens": 12, "prompt_tokens": 24, "gen_batch": 4, "code_tokens": 600, "prose_tokens": 300,
        "seq_len": 64, "batch_tokens": 160, "positions": positions, "draft_vocab": 64, "width": 5, "rank": 8,
        "curve_prompts": 2, "seed": 3, "max_minutes": 5,
    }
    base.update(extra)
    return [f"--{k}={v}" for k, v in base.items()]


def test_both_drafts_train_from_a_live_teacher_and_resume(tiny_llama_dir, tmp_path, capsys):
    report = run_train(parse(*flags(tiny_llama_dir, tmp_path, 400)))
    data = tmp_path / "data"
    rows = torch.load(data / "gen_00000.pt", weights_only=True)
    assert rows and set(rows[0]) == {"source", "id", "split", "prompt_len", "tokens"}  # token ids only
    assert report["gen"]["sequences"] == len(rows)
    curve = json.loads((tmp_path / "drafts" / "mtp" / "curve.json").read_text())
    assert curve[0]["positions"] == 0 and curve[-1]["positions"] >= 400
    for point in curve:
        for kind in ("mtp", "dspark"):
            held = point[kind]["heldout"]
            assert set(held) <= {"chat", "code", "prose"} and held
            for stats in held.values():
                assert 1.0 <= stats["mean_acceptance_length"] <= 6.0 and len(stats["conditional_acceptance"]) == 5
                assert 1.0 <= stats["decode_acceptance_length"] <= 6.0  # tokens per round of a greedy decode
    cfg, model = load_model(tiny_llama_dir, torch.float32, "cpu")
    fp = weights_fingerprint(tiny_llama_dir)
    for kind in ("mtp", "dspark"):
        draft = load_drafter(tmp_path / "drafts" / kind, kind, model, cfg, "cpu", torch.float32, target_fingerprint=fp)
        assert draft.kind == kind
    dspark_cfg = json.loads((tmp_path / "drafts" / "dspark" / "config.json").read_text())
    assert dspark_cfg["direct_input"] is True
    command = dspark_cfg["recipe"]["command"]  # the flags that remake it, not the parser's bookkeeping
    assert command.startswith("adaspec train-draft --") and "--kind=both" in command
    assert "explicit_flags" not in command and "--command=" not in command and "--output=" not in command
    first = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    capsys.readouterr()
    run_train(parse(*flags(tiny_llama_dir, tmp_path, 800)))
    assert "resuming from" in capsys.readouterr().out
    second = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert second["step"] > first["step"] and second["positions"] >= 800
    assert second["curve"][: len(first["curve"])] == first["curve"]


def test_sampler_counts_distinct_positions_and_caps_repeats(tmp_path):
    raw = [("code", torch.arange(10, dtype=torch.int32) + i) for i in range(5)]
    s = Sampler(raw, tmp_path, tokens=20, gen_share=0.5)
    s.gen = [torch.ones(10, dtype=torch.int32)]
    seen = 0
    for _ in range(4):
        batch, new = s.next()
        assert sum(len(w) for w in batch) >= 20
        seen += new
    # 5 raw windows (50 positions) + 1 answer (10) distinct; the answer is used at most twice
    assert seen == 60 and (s.gen_i, s.gen_rep) == (1, 1)


def test_sampler_visits_answers_that_arrive_later_before_any_repeat(tmp_path):
    raw = [("code", torch.arange(10, dtype=torch.int32))]
    s = Sampler(raw, tmp_path, tokens=20, gen_share=0.5)
    s.gen = [torch.full((10,), i, dtype=torch.int32) for i in range(2)]
    firsts = []
    for _ in range(3):
        firsts.append(s.next()[0][0][0].item())
    s.gen += [torch.full((10,), i, dtype=torch.int32) for i in range(2, 4)]  # generation wrote more
    for _ in range(3):
        firsts.append(s.next()[0][0][0].item())
    # 0, 1 first; then their repeats wait: 0 repeated once, new answers 2 and 3 first, then 1's repeat
    assert firsts == [0, 1, 0, 2, 3, 1]
    assert s.gen_i == 4 and s.gen_rep == 2


def test_refusals_name_the_flag(tiny_llama_dir, tmp_path):
    args = flags(tiny_llama_dir, tmp_path, 10)
    with pytest.raises(ConfigError, match="--data_dir and --checkpoint"):
        run_train(parse(*[a for a in args if not a.startswith("--checkpoint")]))
    (tmp_path / "drafts").mkdir()
    (tmp_path / "drafts" / "notes.txt").write_text("mine")
    with pytest.raises(InputFileError, match="--output"):
        run_train(parse(*args))
