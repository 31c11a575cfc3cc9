"""Tensor parallel, driver and workers (issue 12, R-H2).

Rank 0 is the driver: it runs the whole engine (scheduler, drafts, adaptive control, sampling,
acceptance) on its target shard, and every control decision is its alone. Each target forward is
one message from rank 0 (`TPDriverRunner.forward`): the flat input ids (draft tokens included),
the layout (slots, start positions, row counts) and the rows to sample. Every rank runs its shard
of that forward with the same inputs; the all-reduces inside give all of them the same hidden
states and the all-gathered logits. KV writes follow the layout, so a rollback (a length change on
rank 0) needs no message. Slot copies (forks) are messages too.

After each round rank 0 sends the round's outcome, the committed tokens and KV length of every
request in it (`commit`): the one consensus per round. Workers keep a mirror of it; `report()`
gathers the mirrors so tests can check that no rank diverged. Drafts run on rank 0 only: their
tokens travel in the next forward's message, which is sent anyway, so replicating them would only
repeat the draft's compute on every rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..models.attention import build_layout
from ..runner.model_runner import ForwardInputs, ModelRunner


def _bcast(obj=None, src: int = 0, group=None):
    box = [obj]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


class _BroadcastKV:
    """The driver's KV cache: copy_slot is sent to every rank first."""

    def __init__(self, kv, send):
        self._kv, self._send = kv, send

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        self._send(("copy_slot", src, dst, length))
        self._kv.copy_slot(src, dst, length)

    def __getattr__(self, name):
        return getattr(self._kv, name)


class TPDriverRunner(ModelRunner):
    def __init__(self, model, num_slots: int, max_len: int, device, group=None):
        super().__init__(model, num_slots, max_len, device)
        self.group = group
        self._layout_args = None
        self.kv = _BroadcastKV(self.kv, self.send)
        self.closed = False

    def send(self, msg) -> None:
        _bcast(msg, group=self.group)

    def prepare(self, slots, starts, rows, sample_rows) -> ForwardInputs:
        self._layout_args = (list(slots), list(starts), [len(r) for r in rows])
        return super().prepare(slots, starts, rows, sample_rows)

    def forward(self, inputs: ForwardInputs, capture_layers: tuple[int, ...] = ()):
        slots, starts, lens = self._layout_args
        self.send(("forward", slots, starts, lens, inputs.input_ids.tolist(), inputs.sample_rows.tolist(),
                   tuple(capture_layers)))
        return super().forward(inputs, capture_layers)

    def commit(self, updates: list[tuple[str, int, list[int]]]) -> None:
        """updates: (request id, KV length, tokens committed this round) per request of the round."""
        self.send(("commit", updates))

    def report(self) -> list[dict]:
        """Every worker's mirror {request id: (KV length, committed tokens)}, by rank (rank 0: None)."""
        self.send(("report",))
        out = [None] * dist.get_world_size(self.group)
        dist.gather_object(None, out, dst=0, group=self.group)
        return out

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.send(("stop",))


def worker_loop(model, num_slots: int, max_len: int, device, group=None) -> None:
    """A non-zero rank: run every message of rank 0 until "stop"."""
    runner = ModelRunner(model, num_slots, max_len, device)
    mirror: dict[str, tuple[int, list[int]]] = {}
    sliding = model.config.sliding_window
    while True:
        msg = _bcast(None, group=group)
        op = msg[0]
        if op == "forward":
            _, slots, starts, lens, ids, sample_rows, capture = msg
            inputs = ForwardInputs(
                input_ids=torch.tensor(ids, dtype=torch.long, device=device),
                layout=build_layout(slots, starts, lens, device, sliding),
                sample_rows=torch.tensor(sample_rows, dtype=torch.long, device=device),
            )
            runner.forward(inputs, capture)
        elif op == "copy_slot":
            runner.kv.copy_slot(*msg[1:])
        elif op == "commit":
            for rid, kv_len, tokens in msg[1]:
                _, have = mirror.get(rid, (0, []))
                mirror[rid] = (kv_len, have + list(tokens))
        elif op == "report":
            dist.gather_object(mirror, None, dst=0, group=group)
        elif op == "stop":
            return
        else:  # a message this version does not know: a bug, never a user's input
            raise RuntimeError(f"tensor-parallel worker: unknown message {op!r}")
