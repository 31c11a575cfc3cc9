"""Broken `--model` / `--draft_model` paths and directories: one line naming the flag and the file (issue 8, R-A1).

Each case copies the tiny model directory, damages one thing, and runs `adaspec generate` on it:
exit 2, one error line naming `--model` (or `--draft_model`), no traceback, no weights loaded.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from refusal import refused


def _copy(src, tmp_path, name="m"):
    d = tmp_path / name
    shutil.copytree(src, d)
    return d


def _edit_config(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))


def _break(kind, d):
    if kind == "truncated config":
        text = (d / "config.json").read_text()
        (d / "config.json").write_text(text[: len(text) // 2])
    elif kind == "config lacks hidden_size":
        _edit_config(d, hidden_size=None)
    elif kind == "hidden_size is text":
        _edit_config(d, hidden_size="sixty-four")
    elif kind == "negative layers":
        _edit_config(d, num_hidden_layers=-2)
    elif kind == "config is a list":
        (d / "config.json").write_text("[1, 2]")
    elif kind == "unknown architecture":
        _edit_config(d, architectures=["GPT2LMHeadModel"], model_type="gpt2")
    elif kind == "pre-quantised":
        _edit_config(d, quantization_config={"quant_method": "awq"})
    elif kind == "heads not a multiple of kv heads":
        _edit_config(d, num_key_value_heads=3)
    elif kind == "unsupported rope":
        _edit_config(d, rope_scaling={"rope_type": "longrope", "factor": 2.0})
    elif kind == "no weights":
        for f in d.glob("*.safetensors"):
            f.unlink()
    elif kind == "truncated weights":
        f = next(d.glob("*.safetensors"))
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 2])
    elif kind == "garbage weights":
        next(d.glob("*.safetensors")).write_bytes(b"not a safetensors file at all")
    elif kind == "weights do not fit config":
        _edit_config(d, intermediate_size=256)
    elif kind == "no tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            (d / name).unlink(missing_ok=True)
    elif kind == "broken tokenizer.json":
        (d / "tokenizer.json").write_text("{ not json")
    elif kind == "shards index names a missing file":
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "model-00002.safetensors"}}))
    elif kind == "shards index is not an object":
        (d / "model.safetensors.index.json").write_text("[]")
    # audit (issue 8)
    elif kind == "tie_word_embeddings is text":  # was blamed on the tokenizer
        _edit_config(d, tie_word_embeddings="yes")
    elif kind == "eos outside the vocabulary":  # outputs could never end: was accepted
        _edit_config(d, eos_token_id=5000)
    elif kind == "broken chat template":  # was a jinja2 traceback reported as a bug
        (d / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }")
    elif kind == "vocab_size is a string":
        _edit_config(d, vocab_size="128")
    elif kind == "max_position_embeddings 0":
        _edit_config(d, max_position_embeddings=0)
    elif kind == "rope_theta NaN":
        _edit_config(d, rope_theta=float("nan"))
    elif kind == "empty weights file":
        next(d.glob("*.safetensors")).write_bytes(b"")
    elif kind == "truncated tokenizer.json":
        text = (d / "tokenizer.json").read_text()
        (d / "tokenizer.json").write_text(text[: len(text) // 2])
    else:
        raise AssertionError(kind)


BROKEN = [
    ("truncated config", "not valid JSON"),
    ("config lacks hidden_size", "hidden_size"),
    ("hidden_size is text", "hidden_size"),
    ("negative layers", "num_hidden_layers"),
    ("config is a list", "JSON object"),
    ("unknown architecture", "unsupported architecture"),
    ("pre-quantised", "pre-quantised"),
    ("heads not a multiple of kv heads", "num_key_value_heads"),
    ("unsupported rope", "longrope"),
    ("no weights", "no *.safetensors"),
    ("truncated weights", "truncated"),
    ("garbage weights", "damaged"),
    ("weights do not fit config", "does not match its config.json"),
    ("no tokenizer", "no tokenizer files"),
    ("broken tokenizer.json", "tokenizer.json"),
    ("shards index names a missing file", "missing"),
    ("shards index is not an object", "weight_map"),
    ("tie_word_embeddings is text", "'tie_word_embeddings' must be true or false"),
    ("eos outside the vocabulary", "eos_token_id"),
    ("broken chat template", "chat template cannot be rendered"),
    ("vocab_size is a string", "vocab_size"),
    ("max_position_embeddings 0", "max_position_embeddings"),
    ("rope_theta NaN", "rope_theta"),
    ("empty weights file", "damaged"),
    ("truncated tokenizer.json", "tokenizer.json is not valid JSON"),
]


@pytest.mark.parametrize("kind, text", BROKEN, ids=[k for k, _ in BROKEN])
def test_broken_model_directory(kind, text, tiny_llama_dir, tmp_path, capsys, monkeypatch):
    d = _copy(tiny_llama_dir, tmp_path)
    _break(kind, d)
    refused(["generate", f"--model={d}", "--prompt=hi"], capsys, monkeypatch, "--model", contains=[str(d), text])


def test_tokenizer_larger_than_the_model(save_tiny_hf_dir, tmp_path, capsys, monkeypatch):
    """The tiny tokenizer has 103 ids; a model with 100 embedding rows cannot embed ids 100..102."""
    from transformers import LlamaForCausalLM

    from conftest import tiny_llama_config

    d = save_tiny_hf_dir(LlamaForCausalLM(tiny_llama_config(vocab_size=100)).eval(), tmp_path / "small_vocab")
    refused(["generate", f"--model={d}", "--prompt=hi"], capsys, monkeypatch, "--model",
            contains=["the tokenizer has 103 tokens", "vocab_size is 100"])


def test_bad_model_paths(tmp_path, capsys, monkeypatch):
    refused(["generate", f"--model={tmp_path / 'nope'}", "--prompt=hi"], capsys, monkeypatch, "--model",
            contains=["does not exist"])
    (tmp_path / "empty").mkdir()
    refused(["generate", f"--model={tmp_path / 'empty'}", "--prompt=hi"], capsys, monkeypatch, "--model",
            contains=["empty"])
    (tmp_path / "notes.txt").write_text("hello")
    refused(["generate", f"--model={tmp_path / 'notes.txt'}", "--prompt=hi"], capsys, monkeypatch, "--model",
            contains=["not a .gguf"])
    (tmp_path / "fake.gguf").write_text("I am not a GGUF")
    refused(["generate", f"--model={tmp_path / 'fake.gguf'}", "--prompt=hi"], capsys, monkeypatch, "--model",
            contains=["not a GGUF file"])


@pytest.fixture(scope="module")
def mtp_dir(tiny_llama_dir, tmp_path_factory):
    from adaspec.drafts.factory import build_draft, save_draft
    from adaspec.models.loader import load_model, weights_fingerprint

    cfg, target = load_model(tiny_llama_dir, torch.float32, "cpu")
    draft = build_draft("mtp", cfg, torch.arange(cfg.vocab_size), max_steps=3).init_from_target(target)
    return save_draft(draft, tmp_path_factory.mktemp("mtp3"), weights_fingerprint(tiny_llama_dir))


DRAFT_CASES = [
    ("missing", "does not exist"),
    ("a file", "is a file"),
    ("no config", "no config.json"),
    ("truncated config", "cannot be read as JSON"),
    ("not a draft", "not an adaspec draft"),
    ("other kind", "'mtp' draft"),
    ("too few steps", "--num_speculative_tokens"),
    ("other target", "another target model"),
    ("no weights", "model.safetensors is missing"),
    ("shipped draft for another model", "made for"),
]


@pytest.mark.parametrize("kind, text", DRAFT_CASES, ids=[k for k, _ in DRAFT_CASES])
def test_broken_draft(kind, text, tiny_llama_dir, mtp_dir, tmp_path, capsys, monkeypatch):
    d = _copy(mtp_dir, tmp_path, "draft")
    algo, k = "MTP", 3
    if kind == "missing":
        d = tmp_path / "nothing"
    elif kind == "a file":
        d = d / "config.json"
    elif kind == "no config":
        (d / "config.json").unlink()
    elif kind == "truncated config":
        (d / "config.json").write_text((d / "config.json").read_text()[:40])
    elif kind == "not a draft":
        (d / "config.json").write_text(json.dumps({"format": "something"}))
    elif kind == "other kind":
        algo, k = "DSpark", 5
    elif kind == "too few steps":
        k = 5
    elif kind == "other target":
        cfg = json.loads((d / "config.json").read_text())
        cfg["target"]["hidden_size"] = 999
        (d / "config.json").write_text(json.dumps(cfg))
    elif kind == "no weights":
        (d / "model.safetensors").unlink()
    flag = "--draft_model" if kind != "too few steps" else "--num_speculative_tokens"
    draft = [] if kind == "shipped draft for another model" else [f"--draft_model={d}"]
    refused(["generate", f"--model={tiny_llama_dir}", "--prompt=hi", f"--speculative_algorithm={algo}",
             f"--num_speculative_tokens={k}", *draft], capsys, monkeypatch, flag, contains=[text])


def test_a_draft_directory_passed_as_the_model(mtp_dir, capsys, monkeypatch):
    refused(["generate", f"--model={mtp_dir}", "--prompt=hi"], capsys, monkeypatch, "--model",
            contains=["is an adaspec draft", "--draft_model"])


def test_a_target_directory_passed_as_the_draft(tiny_llama_dir, capsys, monkeypatch):
    refused(["generate", f"--model={tiny_llama_dir}", "--prompt=hi", "--speculative_algorithm=MTP",
             f"--draft_model={tiny_llama_dir}"], capsys, monkeypatch, "--draft_model",
            contains=["is a model directory (a target", "adaspec train-draft"])


def test_home_relative_paths_are_expanded(tiny_llama_dir, monkeypatch):
    """`--model=~/...` means the home directory (shells do not expand ~ after `--flag=`)."""
    from adaspec.config import EngineConfig

    monkeypatch.setenv("HOME", str(tiny_llama_dir.parent))
    assert EngineConfig(model=f"~/{tiny_llama_dir.name}").validate().model == str(tiny_llama_dir)
