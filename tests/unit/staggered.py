"""Drive an engine with staggered arrivals: requests join between steps while others decode."""

from __future__ import annotations


def run_staggered(engine, prompts, params, every: int = 2, per_arrival: int = 1):
    """Add `per_arrival` requests every `every` steps, step until all finish.

    Returns the finished RequestOutputs in prompt order."""
    ids, done, step, queue = {}, {}, 0, list(range(len(prompts)))
    while queue or engine.has_unfinished():
        if queue and step % every == 0:
            for i in queue[:per_arrival]:
                ids[engine.add_request(prompts[i], params[i])] = i
            del queue[:per_arrival]
        for out in engine.step():
            if out.finished:
                done[ids[out.request_id]] = out
        step += 1
    return [done[i] for i in range(len(prompts))]
