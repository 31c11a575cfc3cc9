"""Tensor parallel, driver and workers (issue 12, R-H2).

Rank 0 is the driver: it runs the whole engine (scheduler, drafts, adaptive control, sampling,
acceptance) on its target shard, and every control decision is its alone. Each target forward is
one message from rank 0 (`TPDriverRunner.forward`): the flat input ids (draft tokens included),
the layout (slots, start positions, row counts) and the rows to sample. Every rank runs its shard
of that forward with the same inputs; the all-reduces inside give all of them the same hidden
states and the all-gathered logits. KV writes follow the layout, so a rollback (a length change on
rank 0) needs no message. Slot copies (forks) are messages too.

After each round rank 0 sends the round's outcome, the committed tokens and KV length of every
request in it (`commit`): the one consensus per round. Workers keep a mirror of it (finished
requests dropped). `report()` gathers, from every worker, evidence of its own: the token at every
position its KV cache holds per slot (from the forwards it ran) and a checksum of the hidden states
of each forward since the last report (replicated after the all-reduces, so they must equal rank
0's bit for bit); tests compare both with rank 0's committed state every round. Drafts run on rank 0 only: their
tokens travel in the next forward's message, which is sent anyway, so replicating them would only
repeat the draft's compute on every rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..models.attention import build_layout
from ..runner.model_runner import ForwardInputs, ModelRunner
from .launch import broadcast


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
        self.record = False  # keep hidden-state checksums for report() (tests)
        self.hidden_sums: list[float] = []

    def send(self, msg) -> None:
        broadcast(msg, group=self.group)

    def prepare(self, slots, starts, rows, sample_rows) -> ForwardInputs:
        self._layout_args = (list(slots), list(starts), [len(r) for r in rows])
        return super().prepare(slots, starts, rows, sample_rows)

    def forward(self, inputs: ForwardInputs, capture_layers: tuple[int, ...] = ()):
        slots, starts, lens = self._layout_args
        self.send(("forward", slots, starts, lens, inputs.input_ids.tolist(), inputs.sample_rows.tolist(),
                   tuple(capture_layers)))
        out = super().forward(inputs, capture_layers)
        if self.record:
            self.hidden_sums.append(checksum(out.hidden))
        return out

    def commit(self, updates: list[tuple[str, int, list[int], bool]]) -> None:
        """updates: (request id, KV length, tokens committed this round, finished) per request of the round."""
        self.send(("commit", updates))

    def report(self) -> list[dict]:
        """By rank (rank 0: its own hidden checksums only): {"mirror": {request id: (KV length,
        committed tokens)}, "kv_tokens": {slot: tokens at positions 0..}, "hidden_sums": [...]}; the
        checksum lists restart after each report."""
        self.send(("report", self.record))
        out = [None] * dist.get_world_size(self.group)
        dist.gather_object({"hidden_sums": self.hidden_sums}, out, dst=0, group=self.group)
        self.hidden_sums = []
        return out

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.send(("stop",))


def checksum(hidden: torch.Tensor) -> float:
    return float(hidden.double().sum()) + float((hidden.double() * 1.000001).abs().sum())


def worker_loop(model, num_slots: int, max_len: int, device, group=None) -> None:
    """A non-zero rank: run every message of rank 0 until "stop"."""
    runner = ModelRunner(model, num_slots, max_len, device)
    mirror: dict[str, tuple[int, list[int]]] = {}
    sliding = model.config.sliding_window
    record = False  # rank 0 turns evidence keeping on with its first report (tests)
    kv_tokens: dict[int, list[int]] = {}
    sums: list[float] = []
    while True:
        msg = broadcast(group=group)
        op = msg[0]
        if op == "forward":
            _, slots, starts, lens, ids, sample_rows, capture = msg
            inputs = ForwardInputs(
                input_ids=torch.tensor(ids, dtype=torch.long, device=device),
                layout=build_layout(slots, starts, lens, device, sliding, native=model.layer_kernels == "native"),
                sample_rows=torch.tensor(sample_rows, dtype=torch.long, device=device),
            )
            out = runner.forward(inputs, capture)
            if record:
                sums.append(checksum(out.hidden))
                off = 0
                for slot, start, n in zip(slots, starts, lens):
                    row = kv_tokens.setdefault(slot, [])
                    del row[start:]
                    row += ids[off:off + n]
                    off += n
        elif op == "copy_slot":
            runner.kv.copy_slot(*msg[1:])
            src, dst, length = msg[1:]
            if record:
                kv_tokens[dst] = list(kv_tokens.get(src, [])[:length])
        elif op == "commit":
            for rid, kv_len, tokens, finished in msg[1]:
                _, have = mirror.get(rid, (0, []))
                mirror[rid] = (kv_len, have + list(tokens))
                if finished:
                    mirror.pop(rid, None)
        elif op == "report":
            if msg[1] and not record:
                record = True
            dist.gather_object({"mirror": dict(mirror), "kv_tokens": {s: list(t) for s, t in kv_tokens.items()},
                                "hidden_sums": sums}, None, dst=0, group=group)
            sums = []
        elif op == "stop":
            return
        else:  # a message this version does not know: a bug, never a user's input
            raise RuntimeError(f"tensor-parallel worker: unknown message {op!r}")
