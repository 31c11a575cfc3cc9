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


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_both_drafts_train_from_a_live_teacher_and_resume(tiny_llama_dir, tmp_path, capsys, device):
    report = run_train(parse(*flags(tiny_llama_dir, tmp_path, 400, device=device)))
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
    run_train(parse(*flags(tiny_llama_dir, tmp_path, 800, device=device)))
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


def test_curve_points_and_the_wall_budget(tiny_llama_dir, tmp_path, capsys):
    """--curve_points sets where the curve is measured; --wall_minutes (set-up and evaluations
    included) stops the loop early enough to evaluate and save, long before --positions."""
    run_train(parse(*flags(tiny_llama_dir, tmp_path, 10**9, curve_points="0,300,600", wall_minutes=0.25)))
    out = capsys.readouterr().out
    assert "wall budget (0.25 min) reached" in out
    curve = json.loads((tmp_path / "drafts" / "dspark" / "curve.json").read_text())
    points = [p["positions"] for p in curve]
    assert points[0] == 0 and points[-1] < 10**9
    # 0, the first counts at or past 300 and 600 (a batch may overshoot), then the final one
    assert points == sorted(points) and len(points) <= 4
    assert all(p == 0 or p >= 300 for p in points[:-1])
    assert (tmp_path / "drafts" / "mtp" / "model.safetensors").is_file()
    command = json.loads((tmp_path / "drafts" / "mtp" / "config.json").read_text())["recipe"]["command"]
    assert "--curve_points=0,300,600 " in command and "--wall_minutes=0.25" in command  # flags as typed


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no CUDA device is visible")
def test_cuda_without_a_gpu_is_refused_before_any_work(tiny_llama_dir, tmp_path):
    with pytest.raises(ConfigError, match="--device=cuda: torch sees no CUDA device"):
        run_train(parse(*flags(tiny_llama_dir, tmp_path, 10, device="cuda")))
    assert not (tmp_path / "data").exists()


def test_sampler_repeats_each_answer_at_most_gen_repeats_times_and_resumes(tmp_path):
    raw = [("code", torch.arange(10, dtype=torch.int32))]
    s = Sampler(raw, tmp_path, tokens=20, gen_share=0.5, repeats=3)
    s.gen = [torch.full((10,), i, dtype=torch.int32) for i in range(2)]
    reads = [s.next()[0][0][0].item() for _ in range(4)]
    saved = s.state()
    t = Sampler(raw, tmp_path, tokens=20, gen_share=0.5, repeats=3)
    t.gen = list(s.gen)
    t.restore(saved)  # a resumed run reads what the uninterrupted one reads
    rest = [(s.next()[0][0][0].item(), t.next()[0][0][0].item()) for _ in range(4)]
    assert all(a == b for a, b in rest)
    reads += [a for a, _ in rest]
    # each answer 3 times, then raw windows only (whose first token is 0 here: the raw window)
    assert reads[:6] == [0, 1, 0, 1, 0, 1] and s.gen_rep == 4 and not s.queue
    assert all(len(w) == 10 and w[0].item() == 0 and w[-1].item() == 9 for w in s.next()[0])
