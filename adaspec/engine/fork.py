"""Copying and rewinding a request's whole state: target KV, draft caches, pending refresh entries.

Start-up calibration (issue 13) needs many synthetic requests at a long context. Prefilling each
of them separately, and again whenever they leave the calibrated KV range, made the built-in
calibration take an hour. Requests that share one prompt share its prefill instead:

- `fork_request(engine, src)` places a new running request in a free slot with exactly `src`'s
  state: its tokens and lengths, the target KV of positions [0, num_computed), the drafter's
  per-slot state of the same positions (`Drafter.copy_slot`), and the refresh entries the round
  runner still holds for it. Greedy decoding of the fork then produces what `src` would.
- `snapshot_request` / `restore_request`: rewinding is a length change. Forwards only write
  positions >= a request's length (target) or >= its first pending refresh entry (draft), so the
  cached prefix stays valid; restoring the lengths, the tokens and the pending entries puts the
  request back exactly where the snapshot was taken.

Both need a drafter with positional state (`drafts.base.supports_copy_slot`); `can_fork` says
whether this engine has one. Serving never calls these.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..drafts.base import copy_draft_slot, supports_copy_slot
from .request import Request


def can_fork(engine) -> bool:
    return engine.drafter is None or supports_copy_slot(engine.drafter)


def _copy_pending(p: Any) -> Any:
    # the round runner's pending refresh entries of one request: start, hidden chunks, next tokens
    return dataclasses.replace(p, hidden=list(p.hidden), next_tokens=list(p.next_tokens))


@dataclass(frozen=True)
class RequestSnapshot:
    request_id: str
    slot: int
    num_computed: int
    output_token_ids: tuple[int, ...]
    pending: Any  # round runner entries (copied), or None


def snapshot_request(engine, req: Request) -> RequestSnapshot:
    p = engine.rounds.pending.get(req.request_id)
    return RequestSnapshot(req.request_id, req.slot, req.num_computed, tuple(req.output_token_ids),
                           None if p is None else _copy_pending(p))


def restore_request(engine, req: Request, snap: RequestSnapshot) -> None:
    """Rewind `req` to `snap` (taken from this request, which has kept its slot and only grown)."""
    if snap.request_id != req.request_id or snap.slot != req.slot or req.finished:
        raise ValueError(f"snapshot of {snap.request_id} (slot {snap.slot}) cannot restore {req.request_id}")
    if req.num_computed < snap.num_computed or len(req.output_token_ids) < len(snap.output_token_ids):
        raise ValueError("restore_request only rewinds: the request is shorter than the snapshot")
    req.num_computed = snap.num_computed
    req.output_token_ids = list(snap.output_token_ids)
    req.text_stream = None  # the output was rewound: its text is decoded afresh
    if snap.pending is None:
        engine.rounds.pending.pop(req.request_id, None)
    else:
        engine.rounds.pending[req.request_id] = _copy_pending(snap.pending)


def fork_request(engine, src: Request, request_id: str | None = None) -> Request:
    """A new running request in a free slot with `src`'s state (see the module doc)."""
    if not can_fork(engine):
        raise RuntimeError(f"the drafter {type(engine.drafter).__name__} has no copy_slot: requests cannot be forked")
    if src.slot is None or src.finished or not src.prefilled:
        raise ValueError(f"request {src.request_id} is not a running, prefilled request")
    req = Request(request_id or f"fork-{next(engine._ids)}", src.prompt, list(src.prompt_token_ids), src.params)
    if req.request_id in engine.requests:
        raise ValueError(f"request_id {req.request_id!r} is already in use")
    req.output_token_ids = list(src.output_token_ids)
    req.num_computed = src.num_computed
    if not engine.scheduler.place(req):
        raise RuntimeError("no free request slot to fork into")
    engine.kv_cache.copy_slot(src.slot, req.slot, src.num_computed)
    if engine.drafter is not None:
        copy_draft_slot(engine.drafter, src.slot, req.slot, src.num_computed)
    p = engine.rounds.pending.get(src.request_id)
    if p is not None:
        engine.rounds.pending[req.request_id] = _copy_pending(p)
    engine.requests[req.request_id] = req
    return req
