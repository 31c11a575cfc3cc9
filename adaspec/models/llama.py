"""The Llama-family decoder (Llama, Qwen2, Mistral), top to bottom, in plain PyTorch (R-A1).

Parameter names follow the Hugging Face checkpoints (`model.layers.0.self_attn.q_proj.weight`, ...)
so a safetensors state dict loads as is. A forward takes flat rows from any number of requests
(ragged, R-A2) and returns the *pre-norm* hidden states of all rows; `logits()` applies the final
norm and LM head only to the rows that are sampled. Drafts read the hidden states they need
(last layer, or several layers for DSpark) from `forward(capture_layers=...)`.
"""

from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

from . import native_kernels
from .attention import RaggedLayout, ragged_attention
from .config import ModelConfig
from .linear import dense_weight, fuse, native_backend, relayout_fp32
from .rope import RotaryEmbedding, apply_rotary


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        h, qkv_bias = cfg.hidden_size, cfg.attention_bias
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=cfg.o_proj_bias)
        self.qkv_proj = None  # q|k|v in one packed product (fuse_projections); then q/k/v_proj are gone

    def fuse_projections(self, pack) -> bool:
        """q/k/v_proj -> one packed product of their stacked weights (models/linear.fuse)."""
        self.qkv_proj = fuse(self, ("q_proj", "k_proj", "v_proj"), pack)
        return self.qkv_proj is not None

    def forward(self, x, cos, sin, cache_k, cache_v, layout: RaggedLayout, keep: torch.Tensor | None = None):
        """Every row's keys and values go to the cache; `keep` (row indices): only those rows' outputs are
        computed past the attention (a draft's refresh rows need only their cache entries)."""
        T, H, KVH = x.shape[0], self.heads, self.kv_heads
        if layout.native is not None:  # --layer_kernels=native: rotary, cache writes and attention in one call
            if self.qkv_proj is None:
                q, k, v = (p(x).view(T, -1, self.head_dim) for p in (self.q_proj, self.k_proj, self.v_proj))
            else:
                qkv = self.qkv_proj(x).view(T, H + 2 * KVH, self.head_dim)
                q, k, v = qkv[:, :H], qkv[:, H:H + KVH], qkv[:, H + KVH:]
            return self.o_proj(_rows(native_kernels.attend(q, k, v, cache_k, cache_v, layout.native, cos, sin), keep))
        if self.qkv_proj is None:
            q = apply_rotary(self.q_proj(x).view(T, H, self.head_dim), cos, sin)
            k = apply_rotary(self.k_proj(x).view(T, KVH, self.head_dim), cos, sin)
            v = self.v_proj(x).view(T, KVH, self.head_dim)
        else:  # the same values: one product, and q and k rotated together (rotary is per head)
            qkv = self.qkv_proj(x).view(T, H + 2 * KVH, self.head_dim)
            qk = apply_rotary(qkv[:, :H + KVH], cos, sin)
            q, k, v = qk[:, :H], qk[:, H:], qkv[:, H + KVH:]
        return self.o_proj(_rows(ragged_attention(q, k, v, cache_k, cache_v, layout), keep))


def _rows(t: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    return t if keep is None else t.index_select(0, keep)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, f, bias = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = nn.Linear(h, f, bias=bias)
        self.up_proj = nn.Linear(h, f, bias=bias)
        self.down_proj = nn.Linear(f, h, bias=bias)
        self.gate_up_proj = None  # gate|up in one packed product (fuse_projections)

    def fuse_projections(self, pack) -> bool:
        self.gate_up_proj = fuse(self, ("gate_proj", "up_proj"), pack)
        return self.gate_up_proj is not None

    def forward(self, x, native: bool = False):
        if self.gate_up_proj is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        if native:  # --layer_kernels=native
            return self.down_proj(native_kernels.silu_mul(self.gate_up_proj(x)))
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def fuse_linears(self, pack) -> int:
        """models/linear.pack_module's hook: q|k|v and gate|up as one product each; how many fused."""
        return int(self.self_attn.fuse_projections(pack)) + int(self.mlp.fuse_projections(pack))

    def forward(self, x, cos, sin, cache_k, cache_v, layout, keep: torch.Tensor | None = None):
        """`keep` (row indices, optional): every row writes the cache, only these rows' outputs are
        computed (returned in `keep`'s order); the MTP draft's refresh needs just its newest rows."""
        if layout.native is not None:  # --layer_kernels=native: each norm (with the residual add) is one call
            norm1, norm2 = self.input_layernorm, self.post_attention_layernorm
            _, h = native_kernels.add_rmsnorm(x, None, norm1.weight, norm1.eps)
            a = self.self_attn(h, cos, sin, cache_k, cache_v, layout, keep)
            x, h = native_kernels.add_rmsnorm(_rows(x, keep), a, norm2.weight, norm2.eps)  # x + a lands in a (fresh)
            return x + self.mlp(h, native=True)
        x = _rows(x, keep) + self.self_attn(self.input_layernorm(x), cos, sin, cache_k, cache_v, layout, keep)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBackbone(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        # built on the meta device (LlamaForCausalLM) and loaded: no random init. _weight skips it, which
        # also skips torch's first meta normal_ (a lazy ~0.8 s set-up on every start-up)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                         _weight=torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype = torch.float32, device="cpu"):
        super().__init__()
        self.config = cfg
        with torch.device("meta"):
            self.model = LlamaBackbone(cfg)
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.to_empty(device=device)
        self.to(dtype)
        self.rope = RotaryEmbedding(cfg, device, dtype)
        self.requires_grad_(False)
        # the backend of the linear layers (models/linear.py): the dtype's own until loader.load_model repacks
        self.linear_backend, self.linear_choice = native_backend(dtype), None
        # attention, norms and activations (models/native_kernels.py): torch ops until loader.load_model
        # resolves --layer_kernels; "native" is adaspec's C++ kernels (CPU, float32)
        self.layer_kernels, self.layer_kernels_choice = "torch", "torch ops"

    def load_weights(self, state_dict: dict[str, torch.Tensor], relayout: bool = True) -> None:
        """Copy a Hugging Face state dict in; missing or unexpected tensors are an error. `relayout`
        False leaves the fp32 linears row-major for a loader that packs them for another backend
        (models/linear.pack_module relays out what stays fp32)."""
        state_dict = dict(state_dict)
        if self.config.tie_word_embeddings:
            state_dict.pop("lm_head.weight", None)
        own = self.state_dict()
        missing = sorted(set(own) - set(state_dict) - ({"lm_head.weight"} if self.config.tie_word_embeddings else set()))
        unexpected = sorted(k for k in set(state_dict) - set(own) if not k.endswith("rotary_emb.inv_freq"))
        if missing or unexpected:
            raise ValueError(f"checkpoint does not fit the config: missing {missing[:5]}, unexpected {unexpected[:5]}")
        with torch.no_grad():
            for name, tensor in state_dict.items():
                if name in own:
                    if own[name].shape != tensor.shape:
                        raise ValueError(f"{name}: checkpoint shape {tuple(tensor.shape)} != {tuple(own[name].shape)}")
                    own[name].copy_(tensor)
            if self.config.tie_word_embeddings:
                self.lm_head.weight = self.model.embed_tokens.weight
        if relayout:
            self.relayout_for_cpu()

    def relayout_for_cpu(self) -> None:
        """Store fp32 linear weights column-major on CPU (same values, same shapes).

        `F.linear` then hands the GEMM a contiguous [in, out] operand, which this CPU's BLAS runs
        1.5-2x faster for the 4-16 row products of batched decode and speculative verify (bench
        in BENCHMARKS.md). The tied LM head gets its own copy so the embedding stays row-major.
        Other linear backends pack the row-major weights instead (loader.load_model skips this step
        before packing: the copy and the packing's copy back cost ~0.8 s of the bundled model's load,
        BENCHMARKS.md "Stop 48"); what they keep fp32 is relaid out by pack_module. Idempotent; CPU
        fp32 only (models/linear.relayout_fp32).
        """
        relayout_fp32(self)

    def output_weight(self) -> torch.Tensor:
        """The output matrix [V, H] in float32 for drafts to take rows of: the LM head's weight, or
        when the head is packed, the tied embedding (its exact source; a draft packs its rows with
        the same backend, which rounds them as the head did) or the packed head's own values."""
        if not isinstance(self.lm_head, nn.Linear) and self.config.tie_word_embeddings:
            return self.model.embed_tokens.weight
        if getattr(self, "tp_output_weight", None) is not None:  # tensor parallel: the head is a vocab shard
            return self.tp_output_weight
        return dense_weight(self.lm_head)

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,  # [T] int64
        layout: RaggedLayout,
        kv_cache,  # .k / .v: per-layer [S, KVH, max_len, D]
        capture_layers: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Returns pre-norm hidden states [T, hidden] and the outputs of `capture_layers` (same shape)."""
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.rope.cos_sin(layout.row_pos)
        captured = []
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, kv_cache.k[i], kv_cache.v[i], layout)
            if i in capture_layers:
                captured.append(x)
        return x, captured

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head on the selected rows; float32 logits [R, vocab]."""
        return self.lm_head(self.model.norm(hidden)).float()
