"""ModelConfig: the few architecture facts the Llama-family forward needs (R-A1).

Read from a Hugging Face `config.json` dict. Transformers 4.x writes `rope_theta` / `rope_scaling`
at the top level; 5.x writes them inside `rope_parameters`: both are accepted. A missing, mistyped
or impossible field is an `InvalidModelError` naming the field (and the file, when given).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError

SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "MistralForCausalLM": "mistral",
}
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


class UnsupportedModelError(UserError, ValueError):
    """The checkpoint is not one this engine can run; the message says why."""


class InvalidModelError(UserError, ValueError):
    """A model directory is damaged or incomplete (config.json, weights, tokenizer); the message names
    the file and the field."""


_REQUIRED_INTS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def _positive_int(cfg: dict, name: str, where: str, required: bool = True, default: int | None = None) -> int | None:
    v = cfg.get(name)
    if v is None:
        if required:
            raise InvalidModelError(f"{where}: config.json has no {name!r}; this is not a complete Hugging Face "
                                    "config (re-export the model, or pass another --model)", param="--model")
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or isinstance(v, float) and not v.is_integer() or v < 1:
        raise InvalidModelError(f"{where}: config.json field {name!r} must be a positive integer, got {v!r}",
                                param="--model")
    return int(v)


def _positive_float(cfg: dict, name: str, where: str, default: float) -> float:
    v = cfg.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise InvalidModelError(f"{where}: config.json field {name!r} must be a positive finite number, got {v!r}",
                                param="--model")
    return float(v)


def _bool(cfg: dict, name: str, where: str, default: bool = False) -> bool:
    v = cfg.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):  # "yes" would be True by bool(), and fail later inside transformers
        raise InvalidModelError(f"{where}: config.json field {name!r} must be true or false, got {v!r}", param="--model")
    return v


def _token_ids(v: Any, name: str, where: str) -> tuple[int, ...]:
    ids = v if isinstance(v, (list, tuple)) else ([] if v is None else [v])
    if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids):
        raise InvalidModelError(f"{where}: config.json field {name!r} must be a token id or a list of them, "
                                f"got {v!r}", param="--model")
    return tuple(ids)


@dataclass(frozen=True)
class ModelConfig:
    architecture: str  # "llama" | "qwen2" | "mistral"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool  # bias on q/k/v projections (Qwen2 always; Llama when configured)
    o_proj_bias: bool
    mlp_bias: bool
    sliding_window: int | None = None
    rope_scaling: dict[str, Any] | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)

    @classmethod
    def from_hf_dict(cls, cfg: dict[str, Any], source: str | None = None) -> "ModelConfig":
        """`source` (the model directory) is named in errors."""
        where = f"--model={source}" if source else "model config"
        if not isinstance(cfg, dict):
            raise InvalidModelError(f"{where}: config.json must hold a JSON object, got {type(cfg).__name__}",
                                    param="--model")
        archs = cfg.get("architectures") or []
        if not isinstance(archs, list):
            archs = [archs]
        arch = next((SUPPORTED_ARCHITECTURES[a] for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            model_type = cfg.get("model_type")
            if model_type in SUPPORTED_ARCHITECTURES.values():
                arch = model_type
            else:
                raise UnsupportedModelError(
                    f"{where}: unsupported architecture {archs or model_type!r}: adaspec runs "
                    f"{', '.join(SUPPORTED_ARCHITECTURES)} checkpoints", param="--model")
        ints = {name: _positive_int(cfg, name, where) for name in _REQUIRED_INTS}
        num_heads, hidden = ints["num_attention_heads"], ints["hidden_size"]
        num_kv_heads = _positive_int(cfg, "num_key_value_heads", where, required=False, default=num_heads)
        if num_heads % num_kv_heads:
            raise InvalidModelError(f"{where}: config.json num_attention_heads {num_heads} is not a multiple of "
                                    f"num_key_value_heads {num_kv_heads}", param="--model")
        head_dim = _positive_int(cfg, "head_dim", where, required=False)
        if head_dim is None:
            if hidden % num_heads:
                raise InvalidModelError(f"{where}: config.json hidden_size {hidden} is not a multiple of "
                                        f"num_attention_heads {num_heads} and no head_dim is given", param="--model")
            head_dim = hidden // num_heads
        rope_params = cfg.get("rope_parameters") or {}
        if not isinstance(rope_params, dict):
            raise InvalidModelError(f"{where}: config.json rope_parameters must be an object", param="--model")
        rope_theta = _positive_float(cfg, "rope_theta", where, float(rope_params.get("rope_theta", 10000.0) or 10000.0))
        scaling = cfg.get("rope_scaling") or (dict(rope_params) if rope_params else None)
        if scaling is not None and not isinstance(scaling, dict):
            raise InvalidModelError(f"{where}: config.json rope_scaling must be an object or null, got {scaling!r}",
                                    param="--model")
        scaling = _normalise_rope_scaling(scaling, where)
        eos_ids = _token_ids(cfg.get("eos_token_id"), "eos_token_id", where)
        if any(t >= ints["vocab_size"] for t in eos_ids):  # it could never be sampled: outputs would never end
            raise InvalidModelError(f"{where}: config.json eos_token_id {list(eos_ids)} is outside the vocabulary "
                                    f"(vocab_size {ints['vocab_size']})", param="--model")
        bos = cfg.get("bos_token_id")
        if bos is not None:
            _token_ids(bos, "bos_token_id", where)
        sliding = None
        if arch == "mistral" or (arch == "qwen2" and cfg.get("use_sliding_window")):
            sliding = _positive_int(cfg, "sliding_window", where, required=False)
        return cls(
            architecture=arch,
            vocab_size=ints["vocab_size"],
            hidden_size=hidden,
            intermediate_size=ints["intermediate_size"],
            num_layers=ints["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rms_norm_eps=_positive_float(cfg, "rms_norm_eps", where, 1e-6),
            rope_theta=rope_theta,
            max_position_embeddings=_positive_int(cfg, "max_position_embeddings", where, required=False,
                                                  default=2048),
            tie_word_embeddings=_bool(cfg, "tie_word_embeddings", where),  # False: class default of all three
            attention_bias=arch == "qwen2" or bool(cfg.get("attention_bias", False)),
            o_proj_bias=arch != "qwen2" and bool(cfg.get("attention_bias", False)),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            sliding_window=int(sliding) if sliding else None,
            rope_scaling=scaling,
            bos_token_id=bos,
            eos_token_ids=eos_ids,
        )


def _normalise_rope_scaling(scaling: dict[str, Any] | None, where: str = "model config") -> dict[str, Any] | None:
    if not scaling:
        return None
    scaling = dict(scaling)
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise UnsupportedModelError(
            f"{where}: unsupported rope scaling {rope_type!r}: adaspec implements {', '.join(SUPPORTED_ROPE_TYPES)}",
            param="--model")
    if rope_type == "default":
        return None
    scaling["rope_type"] = rope_type
    return scaling
