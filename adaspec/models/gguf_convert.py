"""Convert a Llama-family GGUF file into a Hugging Face style directory (R-A1, R-A5).

The engine computes in float32/bfloat16 on the CPU, so quantised GGUF weights are dequantised once
(with the `gguf` package) and stored as float32 safetensors next to a `config.json` built from the
GGUF metadata and the tokenizer that transformers reconstructs from the GGUF vocabulary (chat
template included). The result loads with `adaspec.models.loader.load_model` and equally with
`transformers.LlamaForCausalLM.from_pretrained`.

llama.cpp's converter reorders the rows of the Q and K projections of Llama/Mistral checkpoints so
that each head's rotary pairs are interleaved (GGML's "normal" RoPE rotates adjacent pairs);
Hugging Face checkpoints rotate the two halves of each head. `unpermute_rotary_rows` undoes it.
Qwen2 GGUFs are written without that permutation (llama.cpp runs them with "neox" RoPE).

The directory is written atomically: everything goes to a temporary sibling directory which is
renamed into place at the end, so an interrupted conversion never leaves a half directory.
`adaspec_source.json` records where the weights came from (path, size, sha256, quantisation):
`loader.weights_fingerprint` / `loader.quantization` read it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

SOURCE_FILE = "adaspec_source.json"
FORMAT_VERSION = 1
# one shard unless the float32 model is larger than this (then model-0000i-of-0000n.safetensors + index)
DEFAULT_MAX_SHARD_BYTES = 4 << 30

# GGUF architecture -> (HF architecture, HF model_type, Q/K rows permuted by llama.cpp's converter)
_ARCHITECTURES = {
    "llama": ("LlamaForCausalLM", "llama", True),
    "mistral": ("MistralForCausalLM", "mistral", True),
    "qwen2": ("Qwen2ForCausalLM", "qwen2", False),
}

_LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_output.bias": "self_attn.o_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


class GGUFConversionError(ValueError):
    """The GGUF file cannot be turned into a checkpoint adaspec runs; the message says why."""


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def hf_tensor_name(gguf_name: str) -> str:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight` (KeyError if unknown)."""
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER_TENSORS:
        return f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}"
    raise KeyError(gguf_name)


def unpermute_rotary_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's Q/K row permutation.

    llama.cpp views each head's rows as (2, D/2) — first half, second half — and stores them
    transposed as (D/2, 2), so that rotary pair i sits in adjacent rows 2i, 2i+1. Here the stored
    rows are viewed as (D/2, 2) and transposed back to (2, D/2).
    """
    rows = w.shape[0]
    if rows % (2 * n_heads):
        raise GGUFConversionError(f"cannot un-permute {rows} rows into {n_heads} rotary heads")
    half = rows // n_heads // 2
    return np.ascontiguousarray(w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def _field(reader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    value = field.contents()
    return default if value is None else value


def quantization_name(reader) -> str:
    """"gguf:Q4_1" for a mostly-Q4_1 file: from `general.file_type`, else the commonest matrix type."""
    import gguf

    file_type = _field(reader, "general.file_type")
    if file_type is not None:
        try:
            name = gguf.LlamaFileType(int(file_type)).name
            return "gguf:" + (name[len("MOSTLY_"):] if name.startswith("MOSTLY_") else name)
        except ValueError:
            pass
    counts = Counter(t.tensor_type.name for t in reader.tensors if len(t.shape) >= 2)
    return "gguf:" + (counts.most_common(1)[0][0] if counts else "F32")


def hf_config_from_gguf(reader, tensor_names: set[str]) -> dict[str, Any]:
    """config.json contents from the GGUF metadata."""
    arch = _field(reader, "general.architecture")
    if arch not in _ARCHITECTURES:
        raise GGUFConversionError(
            f"GGUF architecture {arch!r} is not supported: adaspec converts {', '.join(_ARCHITECTURES)}"
        )
    hf_arch, model_type, _ = _ARCHITECTURES[arch]

    def need(key: str):
        value = _field(reader, f"{arch}.{key}")
        if value is None:
            raise GGUFConversionError(f"GGUF metadata lacks {arch}.{key}")
        return value

    hidden = int(need("embedding_length"))
    heads = int(need("attention.head_count"))
    kv_heads = int(_field(reader, f"{arch}.attention.head_count_kv", heads))
    head_dim = int(
        _field(reader, f"{arch}.attention.key_length", 0)
        or _field(reader, f"{arch}.rope.dimension_count", 0)
        or hidden // heads
    )
    if int(_field(reader, f"{arch}.rope.dimension_count", head_dim)) != head_dim:
        raise GGUFConversionError("partial rotary embedding (rope.dimension_count != head_dim) is not supported")
    if "rope_freqs.weight" in tensor_names:
        raise GGUFConversionError(
            "this GGUF carries precomputed rope frequency factors (rope_freqs.weight, Llama 3.1 style); "
            "convert the original Hugging Face checkpoint instead"
        )
    vocab = _field(reader, f"{arch}.vocab_size")
    if vocab is None:
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        vocab = len(tokens.data) if tokens is not None else None
    if vocab is None:
        raise GGUFConversionError("GGUF metadata gives no vocabulary size")

    cfg: dict[str, Any] = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "intermediate_size": int(need("feed_forward_length")),
        "num_hidden_layers": int(need("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": int(_field(reader, f"{arch}.context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "torch_dtype": "float32",
    }
    theta = float(_field(reader, f"{arch}.rope.freq_base", 10000.0))
    rope_params: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
    scaling_type = _field(reader, f"{arch}.rope.scaling.type")
    if scaling_type not in (None, "none"):
        factor = _field(reader, f"{arch}.rope.scaling.factor")
        if scaling_type not in ("linear", "yarn") or factor is None:
            raise GGUFConversionError(f"unsupported GGUF rope scaling {scaling_type!r}")
        rope_params.update(rope_type=scaling_type, factor=float(factor))
        orig = _field(reader, f"{arch}.rope.scaling.original_context_length")
        if orig is not None:
            rope_params["original_max_position_embeddings"] = int(orig)
    cfg["rope_parameters"] = rope_params
    cfg["rope_theta"] = rope_params["rope_theta"]
    if model_type == "llama":
        cfg["attention_bias"] = "blk.0.attn_q.bias" in tensor_names
        cfg["mlp_bias"] = False
    window = _field(reader, f"{arch}.attention.sliding_window")
    if model_type == "mistral":
        cfg["sliding_window"] = int(window) if window else None
    elif model_type == "qwen2":
        cfg["use_sliding_window"] = False
    special_ids = (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"), ("padding_token_id", "pad_token_id"))
    for key, hf_key in special_ids:
        value = _field(reader, f"tokenizer.ggml.{key}")
        if value is not None:
            cfg[hf_key] = int(value)
    return cfg


def _dequantize(tensor) -> np.ndarray:
    import gguf

    # GGUF shapes list the fastest dimension first; numpy / torch want it last
    shape = tuple(int(d) for d in reversed(tensor.shape))
    return np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(shape)


def _write_weights(
    reader, cfg: dict[str, Any], permuted: bool, out: Path, max_shard_bytes: int, progress: bool
) -> list[str]:
    """Dequantise every tensor into float32 safetensors; returns the files written.

    At most one shard of float32 weights is held in memory: full shards are written as they fill.
    """
    import torch
    from safetensors.torch import save_file
    from tqdm import tqdm

    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    written: list[tuple[str, list[str]]] = []  # (temporary file name, tensor names)
    shard: dict[str, torch.Tensor] = {}
    shard_bytes = 0

    def flush() -> None:
        nonlocal shard, shard_bytes
        name = f"shard-{len(written):05d}.tmp"
        save_file(shard, str(out / name), metadata={"format": "pt"})
        written.append((name, sorted(shard)))
        shard, shard_bytes = {}, 0

    for tensor in tqdm(reader.tensors, desc="dequantising GGUF", unit="tensor", file=sys.stderr, disable=not progress):
        try:
            name = hf_tensor_name(tensor.name)
        except KeyError:
            raise GGUFConversionError(f"unexpected GGUF tensor {tensor.name!r}: not a Llama-family weight") from None
        w = _dequantize(tensor)
        if permuted and ".attn_q." in tensor.name:
            w = unpermute_rotary_rows(w, heads)
        elif permuted and ".attn_k." in tensor.name:
            w = unpermute_rotary_rows(w, kv_heads)
        t = torch.from_numpy(np.require(w, requirements=["C", "W"]))  # F32 tensors are read-only memmaps
        if shard and shard_bytes + t.nbytes > max_shard_bytes:
            flush()
        shard[name] = t
        shard_bytes += t.nbytes

    if not written:  # everything fits in one file
        save_file(shard, str(out / "model.safetensors"), metadata={"format": "pt"})
        return ["model.safetensors"]
    if shard:
        flush()
    n = len(written)
    weight_map, files = {}, []
    for i, (tmp_name, names) in enumerate(written):
        final = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        os.rename(out / tmp_name, out / final)
        files.append(final)
        weight_map.update({k: final for k in names})
    total = sum((out / f).stat().st_size for f in files)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return files + ["model.safetensors.index.json"]


def _apply_umask(directory: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for p in directory.iterdir():
        if p.is_file():
            os.chmod(p, 0o666 & ~umask)


def _write_tokenizer(gguf_path: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    if not getattr(tok, "chat_template", None):
        print(f"adaspec: note: {gguf_path.name} has no chat template", file=sys.stderr)
    tok.save_pretrained(str(out))


def convert_gguf(
    gguf_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    sha256: str | None = None,
    progress: bool = True,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> Path:
    """Write `out_dir` (which must not exist) as a Hugging Face directory converted from `gguf_path`.

    `sha256` may be passed when the caller already hashed the file. Returns `out_dir`.
    Raises FileExistsError when `out_dir` exists (a concurrent conversion may have finished first).
    """
    import gguf

    gguf_path = Path(gguf_path).resolve()
    out_dir = Path(out_dir)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    if out_dir.exists():
        raise FileExistsError(f"output directory already exists: {out_dir}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    stat = gguf_path.stat()
    if sha256 is None:
        sha256 = sha256_file(gguf_path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-{os.getpid()}-", dir=out_dir.parent))
    try:
        reader = gguf.GGUFReader(str(gguf_path))
        arch = _field(reader, "general.architecture")
        cfg = hf_config_from_gguf(reader, {t.name for t in reader.tensors})
        quant = quantization_name(reader)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        gen = {k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in cfg}
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        weight_files = _write_weights(reader, cfg, _ARCHITECTURES[arch][2], tmp, max_shard_bytes, progress)
        del reader
        _write_tokenizer(gguf_path, tmp)
        source = {
            "format_version": FORMAT_VERSION,
            "source": str(gguf_path),
            "source_size": stat.st_size,
            "source_sha256": sha256,
            "quantization": quant,
            "gguf_architecture": arch,
            "stored_dtype": "float32",
            "weight_files": weight_files,
            # every file of the directory with its size: lets a cache check the copy is complete
            "files": {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()},
            "conversion_seconds": round(time.perf_counter() - started, 2),
        }
        (tmp / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
        _apply_umask(tmp)  # mkdtemp makes the directory private; a cache should be readable like any file
        try:
            os.rename(tmp, out_dir)  # atomic; fails if another conversion created out_dir meanwhile
        except OSError as e:
            if out_dir.exists():
                raise FileExistsError(f"output directory already exists: {out_dir}") from e
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
