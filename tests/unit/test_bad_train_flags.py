"""`adaspec train-draft` refuses bad flags and paths before the target loads (issue 8, R-B6).

NaN/inf and out-of-range numbers are refused at parse time (`--max_minutes=nan` used to train
nothing and report "saved"), `--lr=-1` before the data stage, paths of the wrong kind before
anything is written. Flags that do nothing for the chosen `--kind` are warned about in one line.
"""

from __future__ import annotations

import pytest

from refusal import refused


def train(tmp_path, model, *flags, kind="mtp", output=None):
    return ["train-draft", f"--kind={kind}", f"--model={model}", f"--output={output or tmp_path / 'out'}", *flags]


FLAG_CASES = [
    (["--max_minutes=nan"], "--max_minutes", "finite"),
    (["--max_minutes=inf"], "--max_minutes", "finite"),
    (["--max_minutes=0"], "--max_minutes", "> 0"),
    (["--lr=-1"], "--lr", "> 0"),
    (["--lr=nan"], "--lr", "finite"),
    (["--lr=fast"], "--lr", "expected a number"),
    (["--data_minutes=0"], "--data_minutes", "> 0"),
    (["--ckpt_minutes=-inf"], "--ckpt_minutes", "finite"),
    (["--anchor_frac=0"], "--anchor_frac", "(0, 1]"),
    (["--anchor_frac=1.5"], "--anchor_frac", "(0, 1]"),
    (["--steps=0"], "--steps", ">= 1"),
    (["--batch_size=-2"], "--batch_size", ">= 1"),
    (["--raw_tokens=-1"], "--raw_tokens", ">= 0"),
    (["--num_prompts=many"], "--num_prompts", "expected an integer"),
    (["--width=6"], "--width", "allowed values are 5, 7"),
    (["--threads=0"], "--threads", ">= 1"),
    (["--dtype=bfloat16"], "--dtype", "allowed values"),
    (["--draft_vocab=5000"], "--draft_vocab", "vocabulary (128"),  # needs config.json only
    (["--topk=1000"], "--topk", "vocabulary"),
    (["--seq_len=5000"], "--seq_len", "context limit 1024"),
    (["--prompt_tokens=900", "--gen_tokens=200"], "--gen_tokens", "context limit 1024"),
    (["--unrolll=2"], "--unrolll", "adaspec train-draft --help"),
    # audit (issue 8): empty paths silently meant the default; one-value flags given twice kept the last
    (["--data_dir="], "--data_dir", "is empty"), (["--checkpoint="], "--checkpoint", "is empty"),
    (["--lr=1e-3", "--lr=1e-4"], "--lr", "given twice"),
    (["--eval_k=0"], "--eval_k", ">= 1"), (["--seq_len=0"], "--seq_len", ">= 1"), (["--gen_batch=0"], "--gen_batch", ">= 1"),
    (["--seed=1.5"], "--seed", "expected an integer"), (["--data_only=maybe"], "--data_only", "true or false"),
    # --device (issue 11's GPU run): the streaming recipe only; an unknown device names its choices
    (["--device=cuda"], "--device", "--kind=both only"),
    (["--device=tpu"], "--device", "allowed values"),
    (["--curve_points=5,1"], "--curve_points", "ascending"),
    (["--curve_points=1M"], "--curve_points", "comma-separated list of numbers"),
    (["--wall_minutes=0"], "--wall_minutes", "> 0"),
    (["--threads=99999"], "--threads", "at most 1024"),  # audit: OpenMP crashed the process (segfault)
]


@pytest.mark.parametrize("flags, name, text", FLAG_CASES, ids=[f"{c[1]}{i}" for i, c in enumerate(FLAG_CASES)])
def test_bad_train_flag(flags, name, text, tiny_llama_dir, tmp_path, capsys, monkeypatch):
    refused(train(tmp_path, tiny_llama_dir, *flags), capsys, monkeypatch, name, contains=[text])
    assert not (tmp_path / "out").exists()  # nothing written


def test_dspark_rank_beyond_the_draft_vocabulary(tiny_llama_dir, tmp_path, capsys, monkeypatch):
    """Audit (issue 8): --rank=99999999 loaded the target and then tried to allocate the head."""
    refused(train(tmp_path, tiny_llama_dir, "--rank=99999999", kind="dspark"), capsys, monkeypatch, "--rank",
            contains=["draft vocabulary (128"])


def test_dspark_eval_k_beyond_width(tiny_llama_dir, tmp_path, capsys, monkeypatch):
    refused(train(tmp_path, tiny_llama_dir, "--width=5", "--eval_k=6", kind="dspark"), capsys, monkeypatch, "--eval_k",
            contains=["--width=5"])


def test_bad_train_paths(tiny_llama_dir, tmp_path, capsys, monkeypatch):
    existing = tmp_path / "draft.bin"
    existing.write_text("not a directory")
    refused(train(tmp_path, tiny_llama_dir, output=existing), capsys, monkeypatch, "--output", contains=["is a file"])
    assert existing.read_text() == "not a directory"
    foreign = tmp_path / "project"
    foreign.mkdir()
    (foreign / "config.json").write_text('{"my": "settings"}')
    (foreign / "notes.txt").write_text("mine")
    refused(train(tmp_path, tiny_llama_dir, output=foreign), capsys, monkeypatch, "--output",
            contains=["other files"])
    (foreign / "notes.txt").unlink()
    refused(train(tmp_path, tiny_llama_dir, output=foreign), capsys, monkeypatch, "--output",
            contains=["not an adaspec draft"])
    assert (foreign / "config.json").read_text() == '{"my": "settings"}'  # never clobbered
    refused(train(tmp_path, tiny_llama_dir, f"--data_dir={existing}"), capsys, monkeypatch, "--data_dir",
            contains=["is a file"])
    refused(train(tmp_path, tiny_llama_dir, f"--data_dir={foreign}"), capsys, monkeypatch, "--data_dir",
            contains=["already holds other files"])  # audit: shards were written into the user's directory
    (tmp_path / "ck").mkdir()
    refused(train(tmp_path, tiny_llama_dir, f"--checkpoint={tmp_path / 'ck'}"), capsys, monkeypatch, "--checkpoint",
            contains=["is a directory"])
    refused(train(tmp_path, tmp_path / "no_model"), capsys, monkeypatch, "--model", contains=["does not exist"])
    refused(train(tmp_path, tiny_llama_dir, output=existing / "sub"), capsys, monkeypatch, "--output",
            contains=["is a file"])


def test_data_dir_of_another_recipe_is_refused_before_loading(tiny_llama_dir, tmp_path, capsys, monkeypatch):
    import json

    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"recipe": {"num_prompts": 3}, "shards": {}}))
    refused(train(tmp_path, tiny_llama_dir, f"--data_dir={data}"), capsys, monkeypatch, "--data_dir",
            contains=["another recipe"])
    (data / "manifest.json").write_text("{oops")
    refused(train(tmp_path, tiny_llama_dir, f"--data_dir={data}"), capsys, monkeypatch, "--data_dir",
            contains=["damaged"])


def test_flags_without_effect_are_warned(tiny_llama_dir, tmp_path, capsys, monkeypatch):
    """--width with --kind=mtp does nothing: one warning line, then the run goes on (here: a refusal later)."""
    line = refused(train(tmp_path, tiny_llama_dir, "--width=5", "--rank=4", "--draft_vocab=5000"), capsys, monkeypatch,
                   "--draft_vocab")
    assert line
    from adaspec.training.checks import flag_warnings

    class Args:
        kind, data_only = "mtp", True
        explicit_flags = {"--width", "--lr", "--steps"}

    warnings = flag_warnings(Args)
    assert any("--width has no effect with --kind=mtp" in w for w in warnings)
    assert any("--steps, --lr" in w or "--lr" in w and "--data_only=true" in w for w in warnings)

    class Stored:  # the streaming recipe's flags with the stored-signal recipe, and the other way round
        kind, data_only = "dspark", False
        explicit_flags = {"--gen_share", "--wall_minutes", "--rank"}

    class Streaming:
        kind, data_only = "both", False
        explicit_flags = {"--num_prompts", "--batch_size", "--unroll", "--rank", "--gen_share"}

    assert flag_warnings(Stored) == ["--gen_share, --wall_minutes have no effect with --kind=dspark (streaming-recipe "
                                     "flags: they apply to --kind=both)"]
    both = flag_warnings(Streaming)  # --unroll and --rank train the MTP and DSpark students there: no warning
    assert len(both) == 1 and both[0].startswith("--num_prompts, --batch_size have no effect with --kind=both")
