"""DSpark draft: a parallel block backbone, a sequential Markov head and a confidence head.

Context (refresh). An entry (p, h_p, t_{p+1}) becomes one context row c_p = norm(fc(h_p)), where
h_p concatenates the outputs of `capture_layers` (about 1/3, 2/3 of the depth and the last layer).
Every draft layer stores its own keys/values of c_p (its k/v projections, rotary position p) in the
draft's per-slot cache at index p. Context rows carry no query and no MLP, so a row depends on its
own entry only: refreshing in several rounds or at once writes the same numbers.

Block (propose). For the newest token t_n the block has `w` query rows at positions n..n+w-1:
[embed(t_n), mask, ..., mask] (a learned mask embedding). With `direct_input` (drafts trained since
issue 11) every block row also gets `direct(c_{n-1})` added: the context row of the newest position,
which carries the target's last hidden state, enters the block directly and not only through
attention (a draft without it, as saved before, loads with `direct_input=False`). Each layer's block rows attend to every
context row at positions < n and to all block rows, both directions (`block_attention` builds that
mask). One pass gives base logits U_1..U_w over the reduced vocabulary (row k predicts t_{n+k}).
The block always has all w rows, so a w=7 draft asked for 5 tokens proposes exactly the first 5 of
its 7.

Sequential heads (greedy, left to right, x_0 = t_n):
    logits_k = U_k + W1[x_{k-1}] @ W2                         (Markov bias, rank r)
    x_k      = argmax logits_k
    c_k      = sigmoid((w . [h_k ; W1[x_{k-1}]] + b) / T_k)   (confidence, R-D2)
c_k predicts P(x_k accepted | x_1..x_{k-1} accepted); T_k is the per-position temperature found by
Sequential Temperature Scaling after training (buffer `conf_temp`, 1 before calibration).
W1 is indexed by draft-vocabulary id; target tokens outside the draft vocabulary share one row.
"""

from __future__ import annotations

import torch
from torch import nn

from ..models.attention import cache_rows, grouped_attention, slot_range, tile_mask
from ..models.config import ModelConfig
from ..models.llama import DecoderLayer, RMSNorm
from ..models.rope import apply_rotary
from ..sampling.sampler import first_argmax
from .base import DraftBatch, DraftOutput
from .mtp import DraftVocab, Rotary, TargetEmbedding, share_target_weights

WIDTHS = (5, 7)


def default_capture_layers(num_layers: int) -> tuple[int, ...]:
    """Outputs of the layers ending the first and second third, and the last layer."""
    picks = {max(0, round(num_layers / 3) - 1), max(0, round(2 * num_layers / 3) - 1), num_layers - 1}
    return tuple(sorted(picks))


def block_mask(ctx_len: torch.Tensor, L: int, w: int) -> torch.Tensor:
    """[B, 1, w, L + w] bool: block rows see context keys < ctx_len[b] and every block row.

    (Training packs several blocks of one sequence into one row group and builds the equivalent
    mask itself: each block sees the context before its own anchor and only its own rows.)
    """
    ctx = torch.arange(L, device=ctx_len.device)[None, :] < ctx_len[:, None]  # [B, L]
    full = torch.cat([ctx, torch.ones(len(ctx_len), w, dtype=torch.bool, device=ctx_len.device)], dim=1)
    return full[:, None, None, :].expand(-1, 1, w, -1)


class DSparkLayer(DecoderLayer):
    """A Llama decoder layer (same weights layout) whose attention reads context K/V (from target
    features) + the block."""

    def fuse_linears(self, pack) -> int:
        """Its attention multiplies k/v (context) and q (block) apart: only gate|up fuse (issue 14)."""
        return int(self.mlp.fuse_projections(pack))

    def context_kv(self, c: torch.Tensor, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        """c [..., T, H] -> keys, values [..., T, KVH, D] (rotary at the context positions)."""
        a = self.self_attn
        hc = self.input_layernorm(c)
        k = apply_rotary(a.k_proj(hc).unflatten(-1, (a.kv_heads, a.head_dim)), cos, sin)
        v = a.v_proj(hc).unflatten(-1, (a.kv_heads, a.head_dim))
        return k, v

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask):
        """x [B, w, H]; cos/sin [B, w, 1, D]; ctx_k/v [B, KVH, L, D]; mask [B, 1, w, L + w]."""
        a = self.self_attn
        B, w, _ = x.shape
        hx = self.input_layernorm(x)
        q = apply_rotary(a.q_proj(hx).view(B, w, a.heads, a.head_dim), cos, sin).transpose(1, 2)
        k = apply_rotary(a.k_proj(hx).view(B, w, a.kv_heads, a.head_dim), cos, sin).transpose(1, 2)
        v = a.v_proj(hx).view(B, w, a.kv_heads, a.head_dim).transpose(1, 2)
        keys, values = torch.cat([ctx_k, k], dim=2), torch.cat([ctx_v, v], dim=2)
        out = grouped_attention(q, keys, values, tile_mask(mask, a.heads // a.kv_heads))
        x = x + a.o_proj(out.transpose(1, 2).reshape(B, w, a.heads * a.head_dim))
        return x + self.mlp(self.post_attention_layernorm(x))


class DSparkDraft(nn.Module):
    kind = "dspark"

    def __init__(
        self,
        cfg: ModelConfig,
        d2t: torch.Tensor,
        width: int = 7,
        num_layers: int = 1,
        rank: int = 128,
        capture_layers: tuple[int, ...] | None = None,
        direct_input: bool = False,
    ):
        super().__init__()
        if width not in WIDTHS:
            raise ValueError(f"DSpark width must be one of {WIDTHS}, got {width}")
        self.cfg, self.width, self.max_steps, self.rank = cfg, width, width, rank
        self.capture_layers = tuple(capture_layers) if capture_layers else default_capture_layers(cfg.num_layers)
        if not all(0 <= i < cfg.num_layers for i in self.capture_layers):
            raise ValueError(f"capture_layers {self.capture_layers} outside the target's {cfg.num_layers} layers")
        H = cfg.hidden_size
        self.fc = nn.Linear(H * len(self.capture_layers), H, bias=False)
        self.ctx_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.mask_embed = nn.Parameter(torch.zeros(H))
        self.direct_input = bool(direct_input)
        self.direct = nn.Linear(H, H, bias=False) if direct_input else None
        if self.direct is not None:
            nn.init.zeros_(self.direct.weight)  # starts as the draft without it
        self.layers = nn.ModuleList(DSparkLayer(cfg) for _ in range(num_layers))
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.vocab = DraftVocab(d2t, cfg.vocab_size)
        N = self.vocab.size
        self.markov_in = nn.Embedding(N + 1, rank)  # W1 (row N: token outside the draft vocabulary)
        self.markov_out = nn.Linear(rank, N, bias=False)  # W2
        self.conf = nn.Linear(H + rank, 1)
        self.register_buffer("conf_temp", torch.ones(width))
        nn.init.normal_(self.markov_in.weight, std=0.02)
        nn.init.zeros_(self.markov_out.weight)
        nn.init.zeros_(self.conf.weight)
        nn.init.zeros_(self.conf.bias)
        self.embed = TargetEmbedding()
        self.rotary = Rotary(cfg)
        self.cache_k: list[torch.Tensor] = []
        self.cache_v: list[torch.Tensor] = []
        self.last_c: torch.Tensor | None = None  # [slots, H]: context row of each slot's newest position

    # ---- construction -----------------------------------------------------------------------
    def bind_target(self, target) -> "DSparkDraft":
        return share_target_weights(self, target)

    @torch.no_grad()
    def init_from_target(self, target) -> "DSparkDraft":
        """Layers from the target's last layers with their residual branches zeroed (o_proj,
        down_proj: the block starts as the identity and learns what to add), final norm from the
        target scaled by 0.1 (the block starts from token embeddings, not final hidden states: at
        full scale the head would be confidently wrong and the TV loss has almost no gradient
        there), mask = mean embedding."""
        n = len(self.layers)
        for layer, src in zip(self.layers, list(target.model.layers)[-n:]):
            layer.load_state_dict(src.state_dict())
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        self.norm.weight.copy_(target.model.norm.weight * 0.1)
        self.mask_embed.copy_(target.model.embed_tokens.weight.float().mean(0))
        return self.bind_target(target)

    def config_dict(self) -> dict:
        return {
            "kind": self.kind, "draft_vocab": self.vocab.size, "width": self.width,
            "num_layers": len(self.layers), "rank": self.rank, "capture_layers": list(self.capture_layers),
            "direct_input": self.direct_input,
        }

    # ---- shared pieces (inference and training) -----------------------------------------------
    def context(self, h: torch.Tensor) -> torch.Tensor:
        return self.ctx_norm(self.fc(h))

    def block_inputs(self, newest: torch.Tensor, dtype: torch.dtype, last_c: torch.Tensor | None = None) -> torch.Tensor:
        """[B, w, H]: embed(t_n) then w-1 mask embeddings; plus direct(c_{n-1}) on every row when the
        draft has the direct input (`last_c` [B, H]: context rows of the newest positions)."""
        e = self.embed(newest, dtype)[:, None, :]
        m = self.mask_embed.to(dtype)[None, None, :].expand(len(newest), self.width - 1, -1)
        x = torch.cat([e, m], dim=1)
        if self.direct is not None:
            x = x + self.direct(last_c)[:, None, :]
        return x

    def backbone(self, x, positions, ctx_k: list, ctx_v: list, mask) -> tuple[torch.Tensor, torch.Tensor]:
        """x [G, Q, H] block rows, positions [G, Q], per-layer context ctx_k/v [G, KVH, L, D], mask
        [G, 1, Q, L + Q] -> (normed hidden h [G, Q, H], base logits U [G, Q, N] float32)."""
        cos, sin = self.rotary(positions.reshape(-1), x.dtype)
        cos, sin = cos.view(*positions.shape, 1, -1), sin.view(*positions.shape, 1, -1)
        for layer, k, v in zip(self.layers, ctx_k, ctx_v):
            x = layer(x, cos, sin, k, v, mask)
        h = self.norm(x)
        return h, self.vocab.logits(h).float()

    def markov(self, prev: torch.Tensor) -> torch.Tensor:
        """W1[x_{k-1}] for previous draft-vocabulary ids (N = outside the draft vocabulary)."""
        return self.markov_in(prev)

    def step_logits(self, U_k: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return U_k + self.markov_out(m).float()

    def conf_logit(self, h_k: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        """Uncalibrated confidence logit z_k (before the temperature)."""
        return self.conf(torch.cat([h_k, m], dim=-1)).squeeze(-1).float()

    # ---- Drafter protocol -----------------------------------------------------------------------
    def allocate(self, num_slots: int, max_len: int) -> None:
        p = self.norm.weight  # not a linear weight: those may be packed (models/linear.py)
        shape = (num_slots, self.cfg.num_kv_heads, max_len, self.cfg.head_dim)
        self.cache_k = [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in self.layers]
        self.cache_v = [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in self.layers]
        self.last_c = torch.zeros(num_slots, self.cfg.hidden_size, dtype=p.dtype, device=p.device)

    @torch.no_grad()
    def copy_slot(self, src: int, dst: int, length: int) -> bool:
        """Positional state (context row p in every layer's cache): copy [0, length) (drafts/base.py)."""
        if not self.cache_k:
            raise RuntimeError("DSparkDraft.copy_slot before allocate()")
        if src != dst and length > 0:
            for t in self.cache_k + self.cache_v:
                t[dst, :, :length].copy_(t[src, :, :length])
            self.last_c[dst].copy_(self.last_c[src])
        return True

    @torch.inference_mode()
    def draft(self, batch: DraftBatch) -> DraftOutput:
        if not self.cache_k:
            raise RuntimeError("DSparkDraft.draft before allocate()")
        K = batch.num_steps
        if not 0 <= K <= self.width:
            raise ValueError(f"a DSpark draft of width {self.width} proposes 0..{self.width} tokens, asked for {K}")
        dev, dtype = batch.hidden.device, self.norm.weight.dtype
        B = len(batch.slots)
        # refresh: context row c_p -> every layer's cache at index p
        row_slot = torch.tensor([s for s, n in zip(batch.slots, batch.entry_lens) for _ in range(n)], device=dev)
        row_pos = torch.tensor([p for s, n in zip(batch.entry_starts, batch.entry_lens) for p in range(s, s + n)], device=dev)
        c = self.context(batch.hidden.to(dtype))
        cos, sin = self.rotary(row_pos, dtype)
        for layer, ck, cv in zip(self.layers, self.cache_k, self.cache_v):
            k, v = layer.context_kv(c, cos, sin)
            ck[row_slot, :, row_pos] = k
            cv[row_slot, :, row_pos] = v
        # each request's newest entry (entry_lens >= 1, drafts/base.py): its context row, and t_n below
        last = torch.tensor([sum(batch.entry_lens[: b + 1]) - 1 for b in range(B)], device=dev)
        slots = torch.tensor(batch.slots, dtype=torch.long, device=dev)
        self.last_c[slots] = c[last]
        tokens = torch.empty(B, K, dtype=torch.long, device=dev)
        scores = torch.empty(B, K, dtype=torch.float32, device=dev)
        if K == 0:
            return DraftOutput(tokens, scores)
        # propose: the block at positions n..n+w-1 over context positions < n
        ends = [s + n for s, n in zip(batch.entry_starts, batch.entry_lens)]  # n_b
        L = max(ends)
        newest = batch.next_tokens.index_select(0, last)  # t_n
        ctx_len = torch.tensor(ends, dtype=torch.long, device=dev)
        positions = ctx_len[:, None] + torch.arange(self.width, device=dev)[None, :]
        rng = slot_range(batch.slots)  # consecutive slots: views, no copies
        ctx_k = [cache_rows(ck, slots, rng, L) for ck in self.cache_k]
        ctx_v = [cache_rows(cv, slots, rng, L) for cv in self.cache_v]
        mask = block_mask(ctx_len, L, self.width)
        last_c = self.last_c.index_select(0, slots) if self.direct is not None else None
        h, U = self.backbone(self.block_inputs(newest, dtype, last_c), positions, ctx_k, ctx_v, mask)
        prev = self.vocab.t2d[newest]
        temp = self.conf_temp.float()
        for k in range(K):
            m = self.markov(prev)
            best = first_argmax(self.step_logits(U[:, k], m))
            tokens[:, k] = self.vocab.d2t[best]
            scores[:, k] = torch.sigmoid(self.conf_logit(h[:, k], m) / temp[k])
            prev = best
        return DraftOutput(tokens, scores)
