"""Shared fixtures: tiny but complete Hugging Face model directories (R-A1).

`tiny_llama_dir` (session) is a random 2-layer Llama with a character-level tokenizer that encodes
any ASCII text, adds `<s>` (id 1) like Llama does, ends turns with EOS `</s>` (id 2) and has a
simple chat template. Engine tests use it wherever a real model would be too slow.

`save_tiny_hf_dir(model, path)` saves any tiny transformers model together with that tokenizer,
so parity tests can build one directory per architecture variant.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

TINY_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
TINY_UNK_ID, TINY_BOS_ID, TINY_EOS_ID = 0, 1, 2
# one token per character: tab, newline and printable ASCII
TINY_CHARS = ["\t", "\n"] + [chr(i) for i in range(32, 127)]
TINY_TOKENIZER_SIZE = len(TINY_SPECIAL_TOKENS) + len(TINY_CHARS)  # 103
TINY_VOCAB = 128  # model rows: the tokenizer's 103 ids plus unused padding rows, as real models have
TINY_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_hf_tokenizer():
    """A transformers fast tokenizer built with the `tokenizers` library (no download)."""
    from tokenizers import Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(TINY_SPECIAL_TOKENS + TINY_CHARS)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.add_special_tokens(TINY_SPECIAL_TOKENS)
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", TINY_BOS_ID)]
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="</s>"
    )
    hf.chat_template = TINY_CHAT_TEMPLATE
    return hf


def randomise_(model: torch.nn.Module, seed: int = 0, scale: float = 0.1) -> torch.nn.Module:
    """Random weights large enough to matter, including norm weights and biases (which init to 1 / 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * scale)
    return model


def save_hf_dir(model, path: Path) -> Path:
    path = Path(path)
    model.save_pretrained(str(path))
    tiny_hf_tokenizer().save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def save_tiny_hf_dir():
    """Callable (transformers model, directory) -> directory holding the model and the tiny tokenizer."""
    return save_hf_dir


def tiny_llama_config(**overrides):
    from transformers import LlamaConfig

    kwargs = dict(
        vocab_size=TINY_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=TINY_BOS_ID,
        eos_token_id=TINY_EOS_ID,
        pad_token_id=TINY_EOS_ID,
    )
    kwargs.update(overrides)
    return LlamaConfig(**kwargs)


# Lossless tests run on the engine as it was before issue 14 (fp32 linears, torch's layer ops) and
# on what `auto` picks for the bundled model on this machine kind (fp16w linears, adaspec's native
# layer kernels): losslessness is relative to the engine's own target. (fp32 linears with native
# kernels, `auto`'s choice for the tiny test model, is what most other engine tests run.)
LOSSLESS_BACKENDS = ("fp32", "fp16w")
LOSSLESS_LAYER_KERNELS = {"fp32": "torch", "fp16w": "native"}


@pytest.fixture(scope="module", params=LOSSLESS_BACKENDS, ids=lambda b: f"{b}+{LOSSLESS_LAYER_KERNELS[b]}")
def linear_backend(request):
    """The --linear_backend of a lossless test's engines; for the module's tests the engines' default
    --layer_kernels=auto resolves to LOSSLESS_LAYER_KERNELS[backend] (ADASPEC_NATIVE_KERNELS=0 for torch)."""
    from adaspec.models.linear import unavailable_reason
    from adaspec.models.native_kernels import kernels

    why = unavailable_reason(request.param)
    if why:
        pytest.skip(f"--linear_backend={request.param} unavailable here: {why}")
    native = LOSSLESS_LAYER_KERNELS[request.param] == "native"
    if native and isinstance(kernels(), str):
        pytest.skip(f"--layer_kernels=native unavailable here: {kernels()}")
    with pytest.MonkeyPatch.context() as mp:
        if not native:
            mp.setenv("ADASPEC_NATIVE_KERNELS", "0")
        yield request.param


@pytest.fixture
def no_cold_draft(monkeypatch):
    """Sync verify's cold-start allowance off (adaptive/verify_served.py, stop 63): for tests of the gate's model
    opinions, which the allowance would otherwise override for a bucket's first drafted request-rounds."""
    import adaspec.adaptive.verify_served as vs
    monkeypatch.setattr(vs, "COLD_REQUESTS", 0)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """A complete random tiny Llama HF directory (config, safetensors, tokenizer with chat template)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = randomise_(LlamaForCausalLM(tiny_llama_config()).eval(), seed=1234)
    path = save_hf_dir(model, tmp_path_factory.mktemp("tiny_llama"))
    assert json.loads((path / "config.json").read_text())["vocab_size"] == TINY_VOCAB
    return path
