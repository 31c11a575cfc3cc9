"""What a tensor-parallel engine adds to LLMEngine (issue 12): the per-round consensus message and
a clean stop of the workers."""

from __future__ import annotations

import atexit


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
            updates.append((req.request_id, req.num_computed, new, req.finished))
        for rid in [r for r in sent if r not in engine.requests]:  # aborted meanwhile
            sent.pop(rid)
        runner.commit(updates)

    engine.round_observers.append(commit)
    # strong references: at exit the engine itself may already be collected, and the other ranks
    # must still get their "stop" (or they would wait for rank 0 until the collective times out)
    atexit.register(_stop, runner, engine.parallel)


def _stop(runner, launch) -> None:
    if getattr(runner, "closed", True):
        return
    runner.close()
    launch.leave()


def shutdown_parallel(engine) -> None:
    """Stop the workers and leave the process group (idempotent)."""
    runner, launch = getattr(engine, "model_runner", None), getattr(engine, "parallel", None)
    if launch is not None:
        _stop(runner, launch)
