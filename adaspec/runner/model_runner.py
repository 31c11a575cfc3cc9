"""ModelRunner: turns a scheduled batch into tensors, runs the target, returns what gets sampled.

Tensors are born here (`prepare`) and nowhere upstream. The runner owns the model and the KV cache;
it knows nothing of requests' sampling parameters or of stopping.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..models.attention import RaggedLayout, build_layout
from ..models.llama import LlamaForCausalLM
from .kv_cache import KVCache


@dataclass
class ForwardInputs:
    input_ids: torch.Tensor  # [T] int64, flat rows of all requests
    layout: RaggedLayout
    sample_rows: torch.Tensor  # [R] int64, flat row index of each row whose logits are needed


@dataclass
class ForwardOutput:
    hidden: torch.Tensor  # [T, hidden] pre-norm hidden states of every row
    logits: torch.Tensor  # [R, vocab] float32, for ForwardInputs.sample_rows
    captured: list[torch.Tensor]  # outputs of the requested capture layers, each [T, hidden]


class ModelRunner:
    def __init__(self, model: LlamaForCausalLM, num_slots: int, max_len: int, device: torch.device):
        cfg = model.config
        self.model, self.device = model, device
        # a tensor-parallel shard holds only its KV heads (parallel/tensor_parallel.py)
        self.kv = KVCache(cfg.num_layers, num_slots, getattr(model, "local_kv_heads", cfg.num_kv_heads), max_len, cfg.head_dim,
                          next(model.parameters()).dtype, device)

    def prepare(self, slots: list[int], starts: list[int], rows: list[list[int]], sample_rows: list[int]) -> ForwardInputs:
        """rows[b]: input tokens of request b (written at starts[b]..); sample_rows: flat indices to sample."""
        flat = [t for r in rows for t in r]
        layout = build_layout(slots, starts, [len(r) for r in rows], self.device, self.model.config.sliding_window,
                              native=self.model.layer_kernels == "native")
        return ForwardInputs(
            input_ids=torch.tensor(flat, dtype=torch.long, device=self.device),
            layout=layout,
            sample_rows=torch.tensor(sample_rows, dtype=torch.long, device=self.device),
        )

    def forward(self, inputs: ForwardInputs, capture_layers: tuple[int, ...] = ()) -> ForwardOutput:
        hidden, captured = self.model(inputs.input_ids, inputs.layout, self.kv, capture_layers)
        logits = self.model.logits(hidden.index_select(0, inputs.sample_rows))
        return ForwardOutput(hidden=hidden, logits=logits, captured=captured)
