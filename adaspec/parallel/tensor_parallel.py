"""Tensor-parallel sharding of the target (issue 12, R-H2): Megatron-style, on torch.distributed.

Per decoder layer, rank r of `world` keeps:
- attention: a contiguous group of KV heads and the query heads that read them (column-parallel
  q/k/v: the rows of those heads), and the matching input columns of o_proj (row-parallel: partial
  sums, one all-reduce);
- MLP: a contiguous slice of the intermediate size (column-parallel gate/up, row-parallel down:
  one all-reduce);
- the LM head: a contiguous slice of the vocabulary (vocab-parallel; the logits of the sampled
  rows are all-gathered, so every rank sees the full distribution).
Embeddings and norms are replicated, so after each all-reduce every rank holds the same residual
stream (the hidden states the drafts read are the same on every rank).

KV heads that do not divide evenly are split as evenly as they can be (3 KV heads at TP=2: 2 + 1,
with their 6 + 3 query heads); fewer KV heads than ranks is refused (a rank would hold no head).
The all-reduce of two partial float32 sums is commutative, so every rank gets the same bits; a
TP=2 result can still differ from TP=1 where the changed summation order flips a near-tie.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ..config import ConfigError


def split(n: int, parts: int) -> list[range]:
    """Contiguous, as even as possible: split(3, 2) -> [range(0, 2), range(2, 3)]."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for p in range(parts):
        size = base + (1 if p < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


def check_tp(cfg, tp_size: int) -> None:
    """Refusals that depend on the model (before any process starts)."""
    if tp_size > cfg.num_kv_heads:
        raise ConfigError(f"--tp_size={tp_size} exceeds the model's {cfg.num_kv_heads} KV heads: each rank needs at "
                          f"least one KV head; use --tp_size<={cfg.num_kv_heads}", param="--tp_size")
    if tp_size > cfg.intermediate_size or tp_size > cfg.vocab_size:
        raise ConfigError(f"--tp_size={tp_size} is larger than the model's MLP or vocabulary", param="--tp_size")


class RowParallelLinear(nn.Module):
    """y = all_reduce(x_local @ W_local^T) + b: the input features are sharded."""

    def __init__(self, linear: nn.Linear, cols: range, group=None):
        super().__init__()
        w = linear.weight.detach()[:, cols.start:cols.stop].clone()
        self.linear = nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
        self.linear.weight = nn.Parameter(w, requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.group = group

    def forward(self, x):
        y = self.linear(x)
        dist.all_reduce(y, group=self.group)
        return y if self.bias is None else y + self.bias


class VocabParallelHead(nn.Module):
    """Logits over this rank's vocabulary slice, all-gathered into the full vocabulary."""

    def __init__(self, weight: torch.Tensor, rows: range, vocab: int, world: int, group=None):
        super().__init__()
        self.parts = split(vocab, world)
        w = weight.detach()[rows.start:rows.stop].clone()
        self.linear = nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
        self.linear.weight = nn.Parameter(w, requires_grad=False)
        self.group = group

    def forward(self, x):
        local = self.linear(x)
        width = max(len(p) for p in self.parts)  # gloo gathers equal sizes only: pad, gather, trim
        if local.shape[-1] < width:
            local = torch.nn.functional.pad(local, (0, width - local.shape[-1]))
        local = local.contiguous()
        pieces = [torch.empty_like(local) for _ in self.parts]
        dist.all_gather(pieces, local, group=self.group)
        return torch.cat([piece[..., :len(p)] for piece, p in zip(pieces, self.parts)], dim=-1)


def _rows(linear: nn.Linear, rows: list[int]) -> nn.Linear:
    idx = torch.tensor(rows, dtype=torch.long)
    w = linear.weight.detach().index_select(0, idx).clone()
    out = nn.Linear(w.shape[1], w.shape[0], bias=linear.bias is not None, device=w.device, dtype=w.dtype)
    out.weight = nn.Parameter(w, requires_grad=False)
    if linear.bias is not None:
        out.bias = nn.Parameter(linear.bias.detach().index_select(0, idx).clone(), requires_grad=False)
    return out


@torch.no_grad()
def shard_model(model, rank: int, world: int, group=None) -> None:
    """Replace the target's layers by rank `rank`'s shard, in place (float32 or the model's dtype;
    linear backends pack the shard afterwards). Sets model.tp = (rank, world) and model.local_kv_heads."""
    cfg = model.config
    check_tp(cfg, world)
    D = cfg.head_dim
    per_kv = cfg.num_heads // cfg.num_kv_heads
    kv = split(cfg.num_kv_heads, world)[rank]
    q_heads = [h for k in kv for h in range(k * per_kv, (k + 1) * per_kv)]
    q_rows = [h * D + d for h in q_heads for d in range(D)]
    kv_rows = [k * D + d for k in kv for d in range(D)]
    ffn = split(cfg.intermediate_size, world)[rank]
    for layer in model.model.layers:
        at, mlp = layer.self_attn, layer.mlp
        at.q_proj, at.k_proj, at.v_proj = _rows(at.q_proj, q_rows), _rows(at.k_proj, kv_rows), _rows(at.v_proj, kv_rows)
        o_cols = range(q_rows[0], q_rows[-1] + 1)  # contiguous: heads of consecutive KV groups
        at.o_proj = RowParallelLinear(at.o_proj, o_cols, group)
        at.heads, at.kv_heads = len(q_heads), len(kv)
        mlp.gate_proj, mlp.up_proj = _rows(mlp.gate_proj, list(ffn)), _rows(mlp.up_proj, list(ffn))
        mlp.down_proj = RowParallelLinear(mlp.down_proj, ffn, group)
    vocab_rows = split(cfg.vocab_size, world)[rank]
    if not cfg.tie_word_embeddings:  # drafts take rows of the full output matrix (llama.output_weight)
        model.tp_output_weight = model.lm_head.weight.detach().clone()
    model.lm_head = VocabParallelHead(model.lm_head.weight, vocab_rows, cfg.vocab_size, world, group)
    model.tp = (rank, world)
    model.local_kv_heads = len(kv)
