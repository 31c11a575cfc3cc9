"""Ragged attention over the position-indexed KV cache (R-A2).

A forward carries `T` new rows in one flat tensor; request b contributes `q_b` consecutive rows at
positions `start_b .. start_b + q_b - 1`. Projections and MLPs run on the flat rows (no padding
where the cost is). Only attention groups rows by request: queries are scattered into a
`[B, q_max]` grid (a no-op reshape when every request brings the same number of rows, as in plain
decode) and attend to their slot's cache up to the longest context of the batch, rounded up to whole
KEY_BLOCKs, with a mask that hides each request's future and anything past its own length (so a
row's bits do not depend on which rows share its call, see KEY_BLOCK). Requests of very different row
counts (a prefill chunk beside decode rows) attend in separate groups, so nobody is padded to a
long chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from . import native_kernels
from .native_kernels import NativePlan


@dataclass
class AttentionGroup:
    """Requests whose new rows are attended together in one padded [B, q_max] grid."""

    rows: torch.Tensor | None  # [Tg] int64 flat rows of this group, in order; None = all rows
    slots: torch.Tensor  # [B] int64, cache slot of each request
    slot_range: tuple[int, int] | None  # (first, stop) when slots are consecutive: cache view, no gather
    pad_index: torch.Tensor | None  # [Tg] int64 into the [B * q_max] grid; None when dense
    mask: torch.Tensor  # [B, 1, q_max, L] bool, True = may attend (always built: L is padded to KEY_BLOCK)
    num_requests: int
    q_max: int
    ctx_len: int  # L: keys 0..L-1 are read
    # the mask as SDPA's additive float mask (0 / -inf) per dtype, made at its first layer: SDPA
    # would otherwise turn the bool mask into exactly this tensor again in every layer (issue 14)
    additive: dict = field(default_factory=dict, repr=False)

    def sdpa_mask(self, dtype: torch.dtype, group: int = 1) -> torch.Tensor:
        """[B, 1, padded_rows(group * q_max), L]: each query row's mask once per query head of a KV group (tile_mask)."""
        m = self.additive.get((dtype, group))
        if m is None:
            m = torch.zeros(self.mask.shape, dtype=dtype, device=self.mask.device) \
                .masked_fill_(self.mask.logical_not(), float("-inf"))
            m = self.additive[dtype, group] = tile_mask(m, group)
        return m


@dataclass
class RaggedLayout:
    """How the flat rows of one forward map onto request slots. Built once, used by every layer."""

    row_slot: torch.Tensor  # [T] int64, cache slot of each flat row
    row_pos: torch.Tensor  # [T] int64, absolute position of each flat row
    groups: list[AttentionGroup]  # the SDPA path's grids (empty on the native path)
    native: NativePlan | None = None  # set: the layer runs in adaspec's kernels (models/native_kernels.py)


def _group_key(q: int) -> int:
    """Requests are padded only up to others of similar length: decode rows (1), short verify
    blocks, and long prefill chunks never share a grid (a 1-row request padded to a 512-row
    prefill chunk would cost 512x its attention)."""
    return 1 if q == 1 else 1 << (q - 1).bit_length()


def build_layout(
    slots: list[int],
    starts: list[int],
    q_lens: list[int],
    device: torch.device | str = "cpu",
    sliding_window: int | None = None,
    native: bool = False,
) -> RaggedLayout:
    """Layout for requests with cache `slots`, `q_lens[b]` new rows starting at position `starts[b]`.

    `native`: the layer runs in adaspec's kernels (a model's `layer_kernels == "native"`, CPU
    float32); the layout then carries their plan instead of SDPA's padded grids."""
    if not (len(slots) == len(starts) == len(q_lens)) or not slots:
        raise ValueError("build_layout needs one slot, start and q_len per request (at least one)")
    if min(q_lens) < 1:
        raise ValueError("every request in a forward brings at least one row")
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)  # noqa: E731
    row_slot, row_pos, offsets = [], [], []
    for slot, start, q in zip(slots, starts, q_lens):
        offsets.append(len(row_pos))
        row_slot += [slot] * q
        row_pos += range(start, start + q)
    if native:
        return RaggedLayout(row_slot=as_long(row_slot), row_pos=as_long(row_pos), groups=[],
                            native=native_kernels.native_plan(slots, starts, q_lens, sliding_window))
    members: dict[int, list[int]] = {}
    for b, q in enumerate(q_lens):
        members.setdefault(_group_key(q), []).append(b)
    single = len(members) == 1
    groups = []
    for bs in members.values():
        rows = None if single else as_long([offsets[b] + i for b in bs for i in range(q_lens[b])])
        groups.append(_group([slots[b] for b in bs], [starts[b] for b in bs], [q_lens[b] for b in bs],
                             rows, device, sliding_window))
    return RaggedLayout(row_slot=as_long(row_slot), row_pos=as_long(row_pos), groups=groups)


# Keys are read in whole blocks of KEY_BLOCK positions (the cache is allocated to a multiple of it,
# runner/kv_cache.py) and the positions past a request's length are masked. SDPA's CPU kernel sums a
# row's keys in vector chunks with a tail for the remainder, so a row whose key count crosses a chunk
# boundary when other rows join it (a verify block reads its own rows' keys too) was rounded
# differently from the same row decoded alone: on the bundled model a verify block's first row
# differed from the plain row in its last bits at 3 of every 16 context lengths (~3e-5 in the
# logits), enough to move a seeded sample now and then (R-B5) and a greedy near-tie in principle.
# With whole blocks every row sums the same chunks; the extra keys are masked, i.e. exact zeros.
KEY_BLOCK = 16


def padded_length(length: int) -> int:
    """`length` rounded up to a whole number of KEY_BLOCK key positions."""
    return -(-length // KEY_BLOCK) * KEY_BLOCK


def _group(slots, starts, q_lens, rows, device, sliding_window) -> AttentionGroup:
    num_req, q_max = len(slots), max(q_lens)
    ctx_len = padded_length(max(s + q for s, q in zip(starts, q_lens)))
    pad_index = [i for b, q in enumerate(q_lens) for i in range(b * q_max, b * q_max + q)]
    dense = all(q == q_max for q in q_lens)
    # every group is masked: at least its padded key positions (KEY_BLOCK)
    qpos = torch.full((num_req, q_max), -1, dtype=torch.long)
    for b, (start, q) in enumerate(zip(starts, q_lens)):
        qpos[b, :q] = torch.arange(start, start + q)
    keys = torch.arange(ctx_len)
    allowed = keys[None, None, :] <= qpos[:, :, None]
    if sliding_window is not None:
        allowed &= keys[None, None, :] > qpos[:, :, None] - sliding_window
    # padding rows see key 0 only: a fully masked row would turn into NaN inside softmax
    allowed[:, :, 0] |= qpos < 0
    mask = allowed[:, None].to(device)
    return AttentionGroup(
        rows=rows,
        slots=torch.tensor(slots, dtype=torch.long, device=device),
        slot_range=slot_range(slots),
        pad_index=None if dense else torch.tensor(pad_index, dtype=torch.long, device=device),
        mask=mask,
        num_requests=num_req,
        q_max=q_max,
        ctx_len=ctx_len,
    )


def ragged_attention(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, KVH, D]
    v: torch.Tensor,  # [T, KVH, D]
    cache_k: torch.Tensor,  # [S, KVH, max_len, D]
    cache_v: torch.Tensor,  # [S, KVH, max_len, D]
    layout: RaggedLayout,
) -> torch.Tensor:  # [T, H * D]
    if layout.native is not None:
        return native_kernels.attend(q, k, v, cache_k, cache_v, layout.native)
    cache_k[layout.row_slot, :, layout.row_pos] = k
    cache_v[layout.row_slot, :, layout.row_pos] = v
    if len(layout.groups) == 1:
        return _attend(q, cache_k, cache_v, layout.groups[0])
    out = q.new_empty(q.shape[0], q.shape[1] * q.shape[2])
    for g in layout.groups:
        out[g.rows] = _attend(q[g.rows], cache_k, cache_v, g)
    return out


def _attend(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, g: AttentionGroup) -> torch.Tensor:
    keys, values = (cache_rows(c, g.slots, g.slot_range, g.ctx_len) for c in (cache_k, cache_v))
    num_rows, heads, dim = q.shape
    B, q_max = g.num_requests, g.q_max
    if g.pad_index is None:
        grid = q.view(B, q_max, heads, dim)
    else:
        grid = q.new_zeros(B * q_max, heads, dim)
        grid[g.pad_index] = q
        grid = grid.view(B, q_max, heads, dim)
    group = heads // keys.shape[1]
    out = grouped_attention(grid.transpose(1, 2), keys, values, g.sdpa_mask(q.dtype, group))
    out = out.transpose(1, 2).reshape(B * q_max, heads * dim)
    return out if g.pad_index is None else out[g.pad_index]


def slot_range(slots: list[int]) -> tuple[int, int] | None:
    """(first, stop) when `slots` are consecutive and ascending, so their cache rows are a view; else None."""
    return (slots[0], slots[0] + len(slots)) if slots and slots == list(range(slots[0], slots[0] + len(slots))) else None


def cache_rows(cache: torch.Tensor, slots: torch.Tensor, rng: tuple[int, int] | None, length: int) -> torch.Tensor:
    """cache[slots, :, :length] for a [S, KVH, max_len, D] cache: a view when `rng = slot_range(...)`
    is not None, otherwise a gather."""
    if rng is not None:
        return cache[rng[0]:rng[1], :, :length]
    return cache[:, :, :length].index_select(0, slots)


# Query rows per KV head are padded to a whole number of QUERY_BLOCK rows (zero queries, their
# output dropped). SDPA's CPU kernel rounds a row's scores by a GEMM whose kernel depends on how many
# rows share the call: on an AMD EPYC VM (MKL, AVX-512) a row came out with different bits at 1, 2,
# 3 and >= 4 rows, so the bundled model's plain decode row (3 query heads per KV head) differed from
# the same row inside a verify block (3 x (1 + k) rows); on the Intel Xeon VM only a lone row did.
# With every call a multiple of 4 rows, every row had the same bits at every row count tested
# (1..200 rows, 16..720 keys, head size 64; tests/unit/test_attention_rows.py for 8 and 16) on the
# AMD VM; the Intel VM was not available to re-check. Padding only the calls of < 4 rows is not
# enough: with head sizes 8 and 16 a 5-row block still rounded its rows differently from a 4-row
# call. Cost, in a throw-away timing of one layer's call on the AMD VM: 0.73-1.07x at up to 8
# requests and 320 keys, 1.13-1.37x at 16 requests and 600-1216 keys (the plain row's fourth query
# row is real work there).
QUERY_BLOCK = 4


def padded_rows(rows: int) -> int:
    """`rows` rounded up to a whole number of QUERY_BLOCK query rows."""
    return -(-rows // QUERY_BLOCK) * QUERY_BLOCK


def tile_mask(mask: torch.Tensor | None, group: int) -> torch.Tensor | None:
    """[B or 1, 1, Q, L] -> [.., padded_rows(group * Q), L]: each query row's mask once per query
    head of a KV group, in the row order of `grouped_attention`, then copies of the first row for
    its padding rows (any row that sees a key keeps softmax finite; their outputs are dropped)."""
    if mask is None:
        return None
    tiled = mask if group == 1 else mask.repeat(1, 1, group, 1)
    pad = padded_rows(tiled.shape[2]) - tiled.shape[2]
    if pad:
        tiled = torch.cat([tiled, tiled[:, :, :1].expand(-1, -1, pad, -1)], dim=2)
    return tiled


def grouped_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                      tiled_mask: torch.Tensor | None) -> torch.Tensor:
    """q [B, H, Q, D] over keys/values [B, KVH, L, D] -> [B, H, Q, D]; `tiled_mask` from `tile_mask`.

    Grouped-query attention with the query heads of each KV head folded into query rows:
    [B, KVH, group * Q, D] against that KV head's keys, instead of SDPA's enable_gqa. The same
    arithmetic, but on CPU enable_gqa rounds a row differently depending on how many query rows
    share the call (1 in plain decode, 1 + k in a verify), while the folded call gives a row the
    same bits for any number of rows over the same keys (tests/unit/test_attention_rows.py); it is
    also faster for blocks of rows (one [group * Q, D] product per KV head reads its keys once).
    The rows of each KV head are padded to whole QUERY_BLOCKs (see there), so no call runs SDPA's
    own path for a single query row either.
    """
    B, heads, Q, dim = q.shape
    kv_heads = keys.shape[1]
    rows = heads // kv_heads * Q
    folded = q.reshape(B, kv_heads, rows, dim)
    padded = padded_rows(rows)
    if padded != rows:
        folded = torch.cat([folded, folded.new_zeros(B, kv_heads, padded - rows, dim)], dim=2)
    if tiled_mask is not None and tiled_mask.shape[2] != padded:
        raise ValueError(f"tiled_mask has {tiled_mask.shape[2]} query rows, expected {padded} (use tile_mask)")
    out = F.scaled_dot_product_attention(folded, keys, values, attn_mask=tiled_mask)
    if padded != rows:
        out = out[:, :, :rows]
    return out.reshape(B, heads, Q, dim)
