"""MTP draft (DeepSeek-V3 style multi-token prediction head), plus the pieces DSpark shares.

One decoder block (the target's own `DecoderLayer` shape) reads, for a position p,

    x_p = proj(cat(norm_h(h_p), norm_e(embed(t_{p+1}))))        (rotary position p+1)

attends causally over its own per-slot KV cache (one layer, entry p stored at cache index p), and
its output, through its own final norm and a reduced-vocabulary head, predicts t_{p+2}. Drafting
step j >= 2 feeds the block's own output hidden state back as `h` together with the token drafted
at step j-1, one row per request (the sequential cost that grows with k).

Shared with the target, never stored in the draft file: the token embedding, and the output rows
of the draft vocabulary. The head is the target's output matrix restricted to the `d2t` ids
(`DraftVocab`) and is **frozen**: the draft then has to produce hidden states in the target's own
output space (what the target's last layer already does, so the block starts from the target's
last layer), it halves the trainable parameters at a point where data, not model size, limits the
draft (NOTES.md: a larger head memorised), and it keeps the shipped file small (the head is rebuilt
from the target at load time). The draft's own final norm is trainable and rescales per feature.

Training (adaspec/training) uses `fuse()` / `layer_train()` / `head_logits()` below, the same
modules and rotary positions as `draft()`, so what is trained is what is served.
"""

from __future__ import annotations


import torch
from torch import nn
import torch.nn.functional as F

from ..adaptive.scoring import HostPathStop, path_probabilities
from ..models import native_kernels
from ..models.attention import build_layout, grouped_attention, padded_length, tile_mask
from ..models.config import ModelConfig
from ..models.llama import DecoderLayer, RMSNorm
from ..models.rope import RotaryEmbedding, apply_rotary
from .base import DraftBatch, DraftOutput

MTP_MAX_STEPS = 16


class DraftVocab(nn.Module):
    """The reduced output vocabulary: draft id i <-> target id d2t[i].

    `d2t` [N] int64 is stored with the draft; `t2d` [V] (target id -> draft id, N = not in the
    draft vocabulary) and the frozen output rows `head_weight` [N, H] are rebuilt from the target.
    """

    def __init__(self, d2t: torch.Tensor, target_vocab: int):
        super().__init__()
        d2t = torch.as_tensor(d2t, dtype=torch.long)
        if d2t.ndim != 1 or len(d2t) == 0:
            raise ValueError("d2t must be a non-empty 1-d tensor of target token ids")
        if int(d2t.min()) < 0 or int(d2t.max()) >= target_vocab:
            raise ValueError(f"d2t holds ids outside the target vocabulary (size {target_vocab})")
        if len(torch.unique(d2t)) != len(d2t):
            raise ValueError("d2t holds duplicate target ids")
        self.size, self.target_vocab = len(d2t), target_vocab
        self.register_buffer("d2t", d2t)
        t2d = torch.full((target_vocab,), len(d2t), dtype=torch.long)
        t2d[d2t] = torch.arange(len(d2t))
        self.register_buffer("t2d", t2d, persistent=False)
        self.register_buffer("head_weight", torch.zeros(len(d2t), 1), persistent=False)
        self.head = None  # the packed head at inference (models/linear.py); None: F.linear on head_weight
        self._pack = None

    def bind(self, output_weight: torch.Tensor) -> None:
        """Take the target's output rows for the draft ids (a frozen copy, [N, H])."""
        self.head_weight = output_weight.detach()[self.d2t.to(output_weight.device)].clone()
        if self._pack is not None:  # re-bound after packing: repack with the same backend
            self.head = self._pack(self.head_weight, None)

    def pack_linears(self, pack) -> None:
        """models.linear.pack_module's hook: the head multiplies by head_weight outside nn.Linear."""
        self._pack = pack
        self.head = pack(self.head_weight, None)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.head is not None:
            return self.head(x)
        return F.linear(x, self.head_weight.to(x.dtype))


def target_output_weight(target) -> torch.Tensor:
    """The target's output matrix [V, H] (the embedding itself when tied)."""
    return target.output_weight() if hasattr(target, "output_weight") else target.lm_head.weight


class TargetEmbedding:
    """A reference to the target's (frozen) token embedding; not a submodule, so never saved."""

    def __init__(self):
        self.weight: torch.Tensor | None = None

    def __call__(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if self.weight is None:
            raise RuntimeError("draft is not bound to a target: call bind_target(target_model) first")
        return F.embedding(ids, self.weight).to(dtype)


class Rotary:
    """cos/sin for the draft's rows, in the rows' dtype and device (one instance per draft)."""

    def __init__(self, cfg: ModelConfig):
        self.rope = RotaryEmbedding(cfg, "cpu", torch.float32)

    def __call__(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rope.inv_freq.device != positions.device:
            self.rope.inv_freq = self.rope.inv_freq.to(positions.device)
        self.rope.dtype = dtype
        return self.rope.cos_sin(positions)


def attention_train(layer: DecoderLayer, x, cos, sin, extra_k=None, extra_v=None, mask=None):
    """A `DecoderLayer` forward without a cache, for training (autograd-friendly).

    x [B, T, H]; cos/sin [B, T, 1, D]. Keys are this call's own rows followed by `extra_k/v`
    [B, KVH, E, D] (rows of earlier unrolled levels); `mask` [B or 1, 1, T, T + E] bool (True = may
    attend). Returns (output [B, T, H], own keys, own values) with keys [B, KVH, T, D].
    """
    attn = layer.self_attn
    B, T, _ = x.shape
    hx = layer.input_layernorm(x)
    q = apply_rotary(attn.q_proj(hx).view(B, T, attn.heads, attn.head_dim), cos, sin).transpose(1, 2)
    k = apply_rotary(attn.k_proj(hx).view(B, T, attn.kv_heads, attn.head_dim), cos, sin).transpose(1, 2)
    v = attn.v_proj(hx).view(B, T, attn.kv_heads, attn.head_dim).transpose(1, 2)
    keys = k if extra_k is None else torch.cat([extra_k, k], dim=2)
    values = v if extra_v is None else torch.cat([extra_v, v], dim=2)
    out = grouped_attention(q, keys, values, tile_mask(mask, attn.heads // attn.kv_heads))
    x = x + attn.o_proj(out.transpose(1, 2).reshape(B, T, attn.heads * attn.head_dim))
    x = x + layer.mlp(layer.post_attention_layernorm(x))
    return x, k, v


def share_target_weights(draft, target):
    """Give a draft the target's embedding and output rows (frozen, not part of the draft's state)."""
    draft.embed.weight = target.model.embed_tokens.weight
    draft.vocab.bind(target_output_weight(target))
    return draft


class MTPDraft(nn.Module):
    kind = "mtp"
    capture_layers: tuple[int, ...] = ()

    def __init__(self, cfg: ModelConfig, d2t: torch.Tensor, max_steps: int = MTP_MAX_STEPS):
        super().__init__()
        self.cfg, self.max_steps = cfg, max_steps
        H = cfg.hidden_size
        self.norm_h = RMSNorm(H, cfg.rms_norm_eps)
        self.norm_e = RMSNorm(H, cfg.rms_norm_eps)
        self.proj = nn.Linear(2 * H, H, bias=False)
        self.layer = DecoderLayer(cfg)
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.vocab = DraftVocab(d2t, cfg.vocab_size)
        self.embed = TargetEmbedding()
        self.rotary = Rotary(cfg)
        self.cache_k: torch.Tensor | None = None
        self.cache_v: torch.Tensor | None = None
        # serving runs its block in adaspec's layer kernels when the target does (drafts/factory.ready_drafter)
        self.native_kernels = False

    # ---- construction -----------------------------------------------------------------------
    def bind_target(self, target) -> "MTPDraft":
        return share_target_weights(self, target)

    @torch.no_grad()
    def init_from_target(self, target) -> "MTPDraft":
        """Start as "predict what the target predicts at p": the block is the target's last layer
        with its residual branches zeroed (o_proj, down_proj), proj passes norm_h(h) through, and
        the final norm is the target's, so the untrained draft outputs the target's own next-token
        distribution (a sane prior for the token after) instead of confident noise."""
        self.layer.load_state_dict(target.model.layers[-1].state_dict())
        self.layer.self_attn.o_proj.weight.zero_()
        self.layer.mlp.down_proj.weight.zero_()
        self.norm.weight.copy_(target.model.norm.weight)
        H = self.cfg.hidden_size
        self.proj.weight.copy_(torch.cat([torch.eye(H), torch.randn(H, H) * 0.02], dim=1))
        return self.bind_target(target)

    def config_dict(self) -> dict:
        return {"kind": self.kind, "draft_vocab": self.vocab.size, "max_steps": self.max_steps}

    # ---- shared pieces (inference and training) -----------------------------------------------
    def fuse(self, h: torch.Tensor, next_tokens: torch.Tensor) -> torch.Tensor:
        """Block input from features h [.., H] and the embedding of the following token."""
        e = self.embed(next_tokens, h.dtype)
        return self.proj(torch.cat([self._norm(self.norm_h, h), self._norm(self.norm_e, e)], dim=-1))

    def head_logits(self, o: torch.Tensor) -> torch.Tensor:
        """Reduced-vocabulary logits (float32) from block outputs."""
        return self.vocab.logits(self._norm(self.norm, o)).float()

    def _norm(self, norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        """`norm(x)`; serving with adaspec's layer kernels (as its block does) runs it as one kernel call
        instead of ~8 torch ops: three per draft step, in a round whose every op is paid for speculation."""
        if self.native_kernels and x.dim() == 2 and x.dtype == torch.float32 and not torch.is_grad_enabled():
            return native_kernels.add_rmsnorm(x, None, norm.weight, norm.eps)[1]
        return norm(x)

    # ---- Drafter protocol -----------------------------------------------------------------------
    def allocate(self, num_slots: int, max_len: int) -> None:
        p = self.norm.weight  # not a linear weight: those may be packed (models/linear.py)
        # room for proposals past the target's last position (they are never verified there), in
        # whole key blocks: the layouts read keys up to a multiple of KEY_BLOCK (models/attention.py)
        shape = (num_slots, self.cfg.num_kv_heads, padded_length(max_len + self.max_steps), self.cfg.head_dim)
        self.cache_k = torch.zeros(shape, dtype=p.dtype, device=p.device)
        self.cache_v = torch.zeros(shape, dtype=p.dtype, device=p.device)

    @torch.no_grad()
    def copy_slot(self, src: int, dst: int, length: int) -> bool:
        """Positional state (cache index p = entry p): copy indices [0, length) (drafts/base.py)."""
        if self.cache_k is None:
            raise RuntimeError("MTPDraft.copy_slot before allocate()")
        if src != dst and length > 0:
            self.cache_k[dst, :, :length].copy_(self.cache_k[src, :, :length])
            self.cache_v[dst, :, :length].copy_(self.cache_v[src, :, :length])
        return True

    @torch.inference_mode()
    def draft(self, batch: DraftBatch) -> DraftOutput:
        if self.cache_k is None:
            raise RuntimeError("MTPDraft.draft before allocate()")
        K = batch.num_steps
        if not 0 <= K <= self.max_steps:
            raise ValueError(f"MTP draft proposes 0..{self.max_steps} tokens per round, asked for {K}")
        dev = batch.hidden.device
        B = len(batch.slots)
        dtype = self.norm.weight.dtype
        # refresh: entry (p, h_p, t_{p+1}) -> cache index p, rotary position p+1
        layout = build_layout(batch.slots, batch.entry_starts, batch.entry_lens, dev, native=self.native_kernels)
        x = self.fuse(batch.hidden.to(dtype), batch.next_tokens)
        cos, sin = self.rotary(layout.row_pos + 1, dtype)
        # step 1 predicts t_{n+1} from each request's newest entry; its other entries (a deferred refresh
        # can hold hundreds) only write the cache: no output projection or MLP for them (issue 13)
        last = None
        if len(x) > B:
            last = torch.tensor([s - 1 for s in _cumsum(batch.entry_lens)], dtype=torch.long, device=dev)
        h = self.layer(x, cos, sin, self.cache_k, self.cache_v, layout, last)  # [B, H]
        if K == 0:
            return DraftOutput(torch.empty(B, 0, dtype=torch.long, device=dev), torch.empty(B, 0, device=dev))
        newest = [s + n for s, n in zip(batch.entry_starts, batch.entry_lens)]  # n_b
        tokens, scores = [], []
        # the confidence stop on the CPU: each request's path probability kept on the host (the scores are host
        # memory already), so a step's check is a few numpy operations on B numbers instead of a dozen tensor ops
        # over the stacked scores, and the round runner reads each request's length from here (`confident`)
        host = HostPathStop(B, K, batch.stop_below) if batch.stop_below > 0 and K > 1 and dev.type == "cpu" else None
        for j in range(K):
            logits = self.head_logits(h)
            best_logit, best = logits.max(dim=-1)
            tok = self.vocab.d2t[best]
            # the draft's probability of its own choice: exp(max - logsumexp), what log_softmax's max is
            tokens.append(tok), scores.append((best_logit - torch.logsumexp(logits, dim=-1)).exp_())
            if j + 1 == K:
                break
            if batch.stop_below > 0:  # every request's path probability so far below it: drafting has ended
                ended = (host.step(scores[-1].numpy(), j) if host is not None else
                         bool((path_probabilities(torch.stack(scores, dim=1))[:, -1] < batch.stop_below).all()))
                if ended:
                    tokens += [torch.zeros_like(tok)] * (K - j - 1)
                    scores += [torch.zeros_like(scores[-1])] * (K - j - 1)
                    break
            # step j+2: index n_b + j, rotary position n_b + j + 1, fed with its own hidden state
            layout = build_layout(batch.slots, [n + j for n in newest], [1] * B, dev, native=self.native_kernels)
            cos, sin = self.rotary(layout.row_pos + 1, dtype)
            h = self.layer(self.fuse(h, tok), cos, sin, self.cache_k, self.cache_v, layout)
        return DraftOutput(torch.stack(tokens, dim=1), torch.stack(scores, dim=1),
                           confident=host.lengths if host is not None else None)


def _cumsum(xs: list[int]) -> list[int]:
    out, acc = [], 0
    for x in xs:
        acc += x
        out.append(acc)
    return out
