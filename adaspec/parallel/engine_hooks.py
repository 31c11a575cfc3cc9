"""What a tensor-parallel engine adds to LLMEngine (issue 12): the per-round consensus message and
a clean stop of the workers."""

from __future__ import annotations

import atexit
import weakref

import torch.distributed as dist


def install_tp_hooks(engine) -> None:
    runner = engine.model_runner
    sent: dict[str, int] = {}

    def commit(event) -> None:
        updates = []
        for chunk in event.batch.chunks:
            req = chunk.request
            n = sent.get(req.request_id, 0)
            new = list(req.output_token_ids[n:])
            sent[req.request_id] = n + len(new)
            if req.finished:
                sent.pop(req.request_id, None)
            updates.append((req.request_id, req.num_computed, new))
        runner.commit(updates)

    engine.round_observers.append(commit)
    ref = weakref.ref(engine)

    def stop() -> None:
        e = ref()
        if e is not None:
            shutdown_parallel(e)

    atexit.register(stop)


def shutdown_parallel(engine) -> None:
    """Stop the workers and leave the process group (idempotent)."""
    runner, launch = getattr(engine, "model_runner", None), getattr(engine, "parallel", None)
    if launch is None or getattr(runner, "closed", True):
        return
    runner.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    launch.join()
