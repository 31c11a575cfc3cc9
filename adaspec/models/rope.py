"""Rotary position embedding with the scalings Llama-family checkpoints configure (R-A1).

Non-interleaved ("rotate half") convention, as in the Hugging Face checkpoints. Supported
`rope_scaling` types: default, linear, llama3, yarn.
"""

from __future__ import annotations

import math

import torch

from .config import ModelConfig


def inverse_frequencies(cfg: ModelConfig) -> tuple[torch.Tensor, float]:
    """Per-pair inverse frequencies [D/2] (float64) and the attention factor applied to cos/sin."""
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = cfg.rope_scaling
    if scaling is None:
        return inv, 1.0
    kind, factor = scaling["rope_type"], float(scaling.get("factor", 1.0))
    if kind == "linear":
        return inv / factor, 1.0
    if kind == "llama3":
        return _llama3(inv, scaling, factor, cfg.max_position_embeddings), 1.0
    if kind == "yarn":
        return _yarn(inv, scaling, factor, cfg)
    raise ValueError(f"unsupported rope_type {kind!r}")


def _llama3(inv: torch.Tensor, s: dict, factor: float, max_positions: int) -> torch.Tensor:
    low, high = float(s.get("low_freq_factor", 1.0)), float(s.get("high_freq_factor", 4.0))
    # transformers defaults a missing original context to max_position_embeddings (llama3 and yarn)
    old_ctx = float(s.get("original_max_position_embeddings") or max_positions)
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old_ctx / low, inv / factor, inv)
    smooth = (old_ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return torch.where(medium, smoothed, scaled)


def _yarn(inv: torch.Tensor, s: dict, factor: float, cfg: ModelConfig) -> tuple[torch.Tensor, float]:
    dim, base = cfg.head_dim, cfg.rope_theta
    old_ctx = float(s.get("original_max_position_embeddings") or cfg.max_position_embeddings)
    beta_fast, beta_slow = float(s.get("beta_fast") or 32), float(s.get("beta_slow") or 1)

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = s.get("attention_factor")
    if attention_factor is None:
        if s.get("mscale") and s.get("mscale_all_dim"):
            attention_factor = mscale(factor, s["mscale"]) / mscale(factor, s["mscale_all_dim"])
        else:
            attention_factor = mscale(factor)

    def correction_dim(rotations: float) -> float:
        return dim * math.log(old_ctx / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
    extrapolation = 1 - ramp
    inv = (inv / factor) * (1 - extrapolation) + inv * extrapolation
    return inv, float(attention_factor)


class RotaryEmbedding:
    """cos/sin for given positions; computed once per forward, shared by all layers."""

    def __init__(self, cfg: ModelConfig, device: torch.device | str, dtype: torch.dtype):
        inv, self.attention_factor = inverse_frequencies(cfg)
        self.inv_freq = inv.to(torch.float32).to(device)
        self.dtype = dtype

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * self.attention_factor, emb.sin() * self.attention_factor
        return cos.to(self.dtype)[:, None, :], sin.to(self.dtype)[:, None, :]  # [T, 1, D]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, D] rotated by position."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
