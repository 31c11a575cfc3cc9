"""Position-indexed KV cache, one preallocated row of positions per request slot (R-A2).

Layout per layer: `k[slot, kv_head, position, head_dim]` (same for v). A forward writes the keys of
its new rows at their absolute positions; what a request "has" is only its length, kept by the
engine. Rolling back rejected draft rows is therefore free: the engine sets a shorter length and
the next forward overwrites those positions. Serving never copies or compacts anything;
`copy_slot` exists for start-up calibration, which prefills one synthetic request and copies its
prefix into the other slots (issue 13).
"""

from __future__ import annotations

import torch

from ..models.attention import padded_length


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        num_kv_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ):
        self.num_slots = num_slots
        self.max_len = max_len
        # allocated in whole key blocks: attention reads keys up to a multiple of KEY_BLOCK (masked past
        # each request's length), so that a row's rounding does not depend on its neighbours
        shape = (num_slots, num_kv_heads, padded_length(max_len), head_dim)
        # zeros, not empty: masked positions are multiplied by 0 in attention, and 0 * NaN from
        # uninitialised memory would poison the output.
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        """Copy positions [0, length) of every layer from slot `src` to slot `dst` (a request fork)."""
        if not (0 <= src < self.num_slots and 0 <= dst < self.num_slots) or not 0 <= length <= self.max_len:
            raise ValueError(f"copy_slot({src}, {dst}, {length}) outside {self.num_slots} slots x {self.max_len}")
        if src == dst or length == 0:
            return
        for t in self.k + self.v:
            t[dst, :, :length].copy_(t[src, :, :length])
