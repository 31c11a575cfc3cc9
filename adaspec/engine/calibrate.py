"""Start-up warm-up and cost calibration by driving the engine's real rounds (R-F2, R-C3).

Synthetic greedy requests (tokens drawn from `token_seed`) are admitted through the normal
scheduler, prefilled by normal rounds, and then decoded with a *forced* plan: for adaptive verify
every request bucket Bcap x target-row bucket G, for adaptive draft step every Bcap x step count
k. After `warmup_steps` rounds, `windows_per_point` windows of `window_steps` rounds are timed
as wall-clock completion times (the only timing code in adaspec; serving has none). A window's
cost is the whole round: draft, verify, sampling, acceptance, refresh, result transfer — nothing
is added on top later. The measured points are fitted on the CPU into one immutable table.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from ..rounds import RoundPlan
from ..sampling_params import SamplingParams


@dataclass(frozen=True)
class Point:
    bcap: int
    x: int  # target rows G (adaptive verify) or draft steps k (adaptive draft step)
    cost_s: float  # seconds per round, one window's mean
    kv_len: int  # mean context length of the requests during the window


def rows_plan(bcap: int, rows: int, width: int) -> RoundPlan:
    """Full-width drafting, `rows - bcap` verify rows spread as evenly as possible (R-D1)."""
    extra = rows - bcap
    lens = tuple(min(width, extra // bcap + (1 if i < extra % bcap else 0)) for i in range(bcap))
    return RoundPlan(width, lens)


def steps_plan(bcap: int, k: int) -> RoundPlan:
    return RoundPlan(k, (k,) * bcap)


class SyntheticLoad:
    """`bcap` synthetic requests held in the engine's slots, decoded with forced plans."""

    def __init__(self, engine, bcap: int, prompt_len: int, generator: torch.Generator):
        self.engine = engine
        vocab = engine.model_config.vocab_size
        # ids from the lower part of the vocabulary: ordinary tokens, never special ones at the top
        high = max(8, min(vocab, 32000))
        params = SamplingParams(temperature=0, max_tokens=10**9, ignore_eos=True)
        self.requests = []
        for _ in range(bcap):
            ids = torch.randint(3, high, (prompt_len,), generator=generator).tolist()
            req = engine.make_request(ids, params)
            engine.enqueue(req)
            self.requests.append(req)
        while any(not r.prefilled for r in self.requests):
            self.round(RoundPlan(0, ()))

    def round(self, plan: RoundPlan) -> None:
        eng = self.engine
        width = plan.num_steps
        batch = eng.scheduler.schedule(rows_per_decode=1 + width)
        decoding = sum(c.is_decode for c in batch.chunks)
        if len(plan.verify_lens) != decoding:  # prefill rounds and partial batches run plain
            plan = RoundPlan(width, (0,) * decoding) if width else RoundPlan.plain(decoding)
        result = eng.rounds.run(batch.chunks, plan)
        eng.commit(batch, result)

    @property
    def kv_len(self) -> int:
        return max(r.num_computed for r in self.requests)

    def close(self) -> None:
        for r in self.requests:
            self.engine.abort(r.request_id)


def warm_up(engine, shapes: Iterable[tuple[int, RoundPlan]], prompt_len: int = 16) -> int:
    """Run every prepared shape once (R-E4). Returns the number of shapes run."""
    g = torch.Generator().manual_seed(0)
    by_bcap: dict[int, list[RoundPlan]] = {}
    for bcap, plan in shapes:
        by_bcap.setdefault(bcap, []).append(plan)
    n = 0
    for bcap, plans in by_bcap.items():
        load = SyntheticLoad(engine, bcap, prompt_len, g)
        for plan in plans:
            load.round(plan)
            n += 1
        load.close()
    return n


def measure(
    engine,
    grid: dict[int, list[int]],  # Bcap -> x values
    make_plan: Callable[[int, int], RoundPlan],
    contexts: list[tuple[int, int, int]],  # (prefill_tokens, min_kv, max_kv)
    warmup_steps: int,
    window_steps: int,
    windows_per_point: int,
    token_seed: int,
    rows_per_round: Callable[[int, int], int],  # worst-case KV growth of one round at (Bcap, x)
    progress=None,
    requests_per_bucket: Callable[[int], int] = lambda bcap: bcap,  # Bcap x dp_size (R-H1)
) -> list[Point]:
    """Time every grid point in every context range; requests are re-prefilled when they would
    leave the range."""
    g = torch.Generator().manual_seed(token_seed)
    points: list[Point] = []
    for prefill, min_kv, max_kv in contexts:
        for bcap, xs in grid.items():
            n_req = requests_per_bucket(bcap)
            load = SyntheticLoad(engine, n_req, prefill, g)
            for x in xs:
                plan = make_plan(bcap, x)
                need = (warmup_steps + window_steps * windows_per_point) * rows_per_round(bcap, x)
                if load.kv_len + need > max_kv or load.kv_len < min_kv:
                    load.close()
                    load = SyntheticLoad(engine, n_req, prefill, g)
                for _ in range(warmup_steps):
                    load.round(plan)
                for _ in range(windows_per_point):
                    kv0 = load.kv_len
                    t0 = time.perf_counter()
                    for _ in range(window_steps):
                        load.round(plan)
                    if engine.device.type == "cuda":
                        torch.cuda.synchronize(engine.device)
                    elapsed = time.perf_counter() - t0
                    points.append(Point(bcap, x, elapsed / window_steps, (kv0 + load.kv_len) // 2))
                if progress is not None:
                    progress.update(1)
            load.close()
    return points
