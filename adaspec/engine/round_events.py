"""What the engine reports about a completed or failed round (issue 9): observers and error isolation.

`LLMEngine.round_observers` are called with a `RoundEvent` once per completed round (the server's
metrics read it); `LLMEngine.step` raises `RoundFailure` when a round raised, after finishing that
round's requests with reason "error".
"""

from __future__ import annotations

from dataclasses import dataclass

from ..rounds import RoundPlan, RoundResult
from .request import Request
from .scheduler import ScheduledBatch


@dataclass(frozen=True)
class RoundEvent:
    """One completed round, as round observers see it (metrics, R-I2).

    `started` / `finished` are host `perf_counter` readings taken where the round already returns
    to the host: just before it is run and right after its one result read-back, on the thread
    that ran it. No device sync or timing event is added for them (R-F2)."""

    round_id: int
    batch: ScheduledBatch
    decoding: list[Request]  # the round's decoding requests, in the order of result.verify_lens
    plan: RoundPlan
    result: RoundResult
    started: float
    finished: float


class RoundFailure(RuntimeError):
    """A round raised: its requests were finished with reason "error"; the engine can go on."""

    def __init__(self, request_ids: list[str], cause: BaseException):
        super().__init__(f"round failed ({type(cause).__name__}: {cause}); "
                         f"{len(request_ids)} request(s) failed: {', '.join(request_ids[:8])}")
        self.request_ids = request_ids
        self.cause = cause
