"""What an extra token is worth when nothing waits for a slot (issue 13; adaspec's extension of R-D).

Adaptive target verify maximises predicted tokens per ms: every accepted draft token counts as much
as a whole plain-decode token. That holds while requests wait for a slot, since a request that
finishes early hands its slot to the next one. With nothing waiting it does not: the batch's work
ends when its last request ends, and verify admits the candidates of the requests its draft is
surest of, which are not that last request. An extra token for a request only makes it leave one
round earlier, and what that saves is one request's share of a round at the end: c(B) - c(B - 1),
with c(B) the cost of a plain round of B requests. A plain-decode token, by contrast, is worth
c(B) / B. (BENCHMARKS.md, 12-04: 4 requests with 256 tokens each, asynchronous DSpark verify drafted
in 61 of 244 rounds, each 1.5x the cost of a plain round, and shortened the batch by 11 rounds; it
ran at 0.91-0.95x plain.)

So with no request waiting, verify weighs its extra tokens by

    v = (c(B) - c(B - 1)) / (c(B) / B),   clipped to [0, 1],

(verify_budget's `token_value`) and speculates only where they pay at that price. c comes from the
plain-round costs of the cost table (`plain_ms`, one per prepared request bucket), interpolated
linearly between buckets, with c(0) = 0. So v = 1 for a single request: every one of its tokens
ends the batch sooner. Without plain costs (tables written before issue 13), v = 1: today's rule.

This undervalues the tokens of a request that will finish last by a clear margin (each of those
shortens the batch by a whole round at its end); the rule errs towards plain rounds, the floor
issue 13 asks for. The adaptive draft step, whose k is the same for every request, has its own closed-batch
score: when the batch's remaining work ends, each request at its own acceptance (closed_step.py).
"""

from __future__ import annotations

from typing import Callable, Sequence


def closed_batch_value(B: int, waiting: int, buckets: Sequence[int], plain_ms: Callable[[int], "float | None"]) -> float:
    """`token_value` for a round of B decoding requests with `waiting` requests queued for a slot;
    `buckets`: the prepared request buckets; `plain_ms(bucket)`: the table's plain-round cost there."""
    if waiting > 0 or B <= 1:
        return 1.0
    known = sorted((b, c) for b in set(buckets) if b >= 1 and (c := plain_ms(b)) is not None and c > 0)
    hi = next(((b, c) for b, c in known if b >= B), None)
    if hi is None:
        return 1.0  # no plain cost covers B: no basis for a lower value
    lo = max(((b, c) for b, c in known if b < B), default=(0, 0.0))
    slope = (hi[1] - lo[1]) / (hi[0] - lo[0])  # c(B) - c(B - 1), linear between the buckets
    cost_b = lo[1] + slope * (B - lo[0])
    return min(1.0, max(0.0, slope * B / cost_b))
