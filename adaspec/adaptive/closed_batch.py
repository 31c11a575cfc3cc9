"""What each request's extra token is worth when nothing waits for a slot (issue 13; adaspec's extension of R-D).

Adaptive target verify maximises predicted tokens per ms: every accepted draft token counts as much
as a whole plain-decode token. That holds while requests wait for a slot, since a request that
finishes early hands its slot to the next one. With nothing waiting it does not: the batch's work
ends when its last request ends. Request i's tokens save time only through when i leaves: if b
requests are still running when it leaves (b = 1: it is the last), leaving one round earlier saves
c(b) - c(b - 1), with c(b) the cost of a plain round of b requests (c(0) = 0). A plain-decode token,
by contrast, costs c(B) / B. Sorting the finishes, the batch's time is sum_b (c(b) - c(b - 1)) times the
rounds of the request that leaves with b running, so these are exact marginal values.

Which b a request will leave at is known only near the end: a round's accepted length varies, so a
request with r tokens to go finishes within about sqrt(r) tokens of r (the stated prior: variance r + 1
tokens, the spread of about one token per round that the drafts show). With r_i its remaining tokens
(max_tokens less what it generated: an upper bound when an end-of-sequence token stops it sooner),
the finishing points are independent and normal (mean r_i), given request i's the number of others finishing
after it is a Poisson binomial, averaged over i's finishing point (`rank_probabilities`), and

    v_i = E[c(b_i) - c(b_i - 1)],  b_i = 1 + #(requests finishing after i),

scaled so that the batch's values average 1 (they do by themselves, up to the quadrature's error: every b
is some request's). Four requests with equal work to go are all worth 1 (each may end the batch), a request
clearly ahead is worth what its early exit saves, c(B) - c(B - 1) against c(B) / B, and the one likely last
more. These are what the rest of the batch would save running plain; a tail that speculates saves less per
token, so the likely last request's weight is an upper bound.

How much a closed batch speculates at all is still one value for the batch, v_first = (c(B) - c(B - 1)) /
(c(B) / B) (`closed_batch_value`, 0.11-0.15 at B = 4 on the bundled model): the value of a request sure to leave
first, which the draft gate and the asynchronous budget read (verify_budget's `token_value`). The admission
spreads it over the requests, v_first * v_i (RoundPlan.token_value, one per request), so the rows it does admit go
to the requests that end the batch rather than to those its draft is surest of, which then leave early and shorten
nothing (BENCHMARKS.md, 12-04: 4 requests with 256 tokens each, asynchronous DSpark verify drafted in 61 of 244
rounds, each 1.5x the cost of a plain round, and shortened the batch by 11 rounds; it ran at 0.91-0.95x plain).
With equal work to go every v_i is 1 and the admission is stop 63's.

Why the gate keeps v_first, although four prose requests with equal work to go would be worth 1 each and fixed L3
runs them at 1.09x plain while the gate keeps them plain (BENCHMARKS.md, stop 64): a gate at weight 1 drafted four
code requests in 12-15% of rounds and ran them at 0.965x plain (mixed 0.956x, four T = 0.8 cells 0.974-0.980x);
a round's uneven gains on a tie that nothing will spread are worth little, and sporadic drafting does not spread
them. Weighing the gate by the batch's drafted share, by where its drafts land (the requests' weights over their
draft confidences) and giving it the served opinions kept code, chat and mixed near plain, but four prose
requests then kept drafting in some start-up tables' processes and locked plain after 10-13 drafted rounds in
others: the model's prediction for them swung within +-10% of plain from round to round (bench/results/s64).

c comes from the plain-round costs of the cost table (`plain_ms`, one per prepared request bucket),
interpolated linearly between buckets, with c(0) = 0. Without plain costs (tables written before issue
13), every value is 1: today's rule. The adaptive draft step, whose k is the same for every request, has
its own closed-batch score: when the batch's remaining work ends, each request at its own acceptance
(closed_step.py).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

PlainMs = Callable[[int], "float | None"]


def plain_curve(B: int, buckets: Sequence[int], plain_ms: PlainMs) -> list[float] | None:
    """[c(0), ..., c(B)]: a plain round's ms for b requests, linear between the prepared buckets' plain costs,
    c(0) = 0; None when no bucket with a plain cost covers B."""
    known = sorted((b, c) for b in set(buckets) if b >= 1 and (c := plain_ms(b)) is not None and c > 0)
    if not known or known[-1][0] < B:
        return None
    points = [(0, 0.0)] + known
    curve = []
    for b in range(B + 1):
        hi = next(i for i, (x, _) in enumerate(points) if x >= b)
        (x0, c0), (x1, c1) = points[max(hi - 1, 0)], points[hi]
        curve.append(c1 if x1 == x0 else c0 + (c1 - c0) * (b - x0) / (x1 - x0))
    return curve


def closed_batch_value(B: int, waiting: int, buckets: Sequence[int], plain_ms: PlainMs) -> float:
    """The token value of a request sure to leave first in a round of B decoding requests with `waiting` queued
    for a slot: (c(B) - c(B - 1)) / (c(B) / B), clipped to [0, 1]; 1 with a request waiting, at B = 1, or
    without plain costs: v_first, a closed batch's value for the gate and the budget (module docstring; the start-up
    log prints it per bucket)."""
    if waiting > 0 or B <= 1:
        return 1.0
    c = plain_curve(B, buckets, plain_ms)
    if c is None:
        return 1.0
    return min(1.0, max(0.0, (c[B] - c[B - 1]) * B / c[B]))


# Gauss-Hermite points and weights (probabilists', normalised) over a request's finishing point: 16 put the rank
# probabilities within 1e-3 of 24 points' on the batches stop 64 tried (B = 4 and 8, ties and spreads)
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(16)
_WEIGHTS = _WEIGHTS / math.sqrt(2.0 * math.pi)


def rank_probabilities(remaining: Sequence[int]) -> list[list[float]]:
    """Per request i: [P(k others finish after it) for k = 0..B-1] under the module's prior: finishing points
    independent, normal with mean r and variance r + 1; given i's, the others' are a Poisson binomial, averaged over
    i's by Gauss-Hermite quadrature (0.05-0.08 ms at B = 4, 0.5-0.6 ms at B = 16 on the 2-core VM:
    bench/results/s64/weights_time.py)."""
    r = np.array([max(0, int(x)) for x in remaining], dtype=np.float64)
    B = len(r)
    sd = np.sqrt(r + 1.0)
    t = r[:, None] + sd[:, None] * _NODES[None, :]  # [B, T]: request i's finishing point at each node
    z = (t[:, None, :] - r[None, :, None]) / (sd[None, :, None] * math.sqrt(2.0))
    # q[i, j, n] = P(request j finishes after t[i, n]); 0 for j == i, which leaves the recursion unchanged
    q = 0.5 * np.fromiter(map(math.erfc, z.ravel().tolist()), dtype=np.float64, count=z.size).reshape(z.shape)
    q[np.arange(B), np.arange(B)] = 0.0
    dist = np.zeros((B, len(_NODES), B + 1))  # [..., 1 + k]: P(k after); [..., 0] stays 0 for the shift
    dist[:, :, 1] = 1.0
    for j in range(B):
        qj = q[:, j, :, None]
        dist[:, :, 1:] = dist[:, :, 1:] * (1.0 - qj) + dist[:, :, :-1] * qj
    return (dist[:, :, 1:] * _WEIGHTS[None, :, None]).sum(axis=1).tolist()


def closed_batch_values(remaining: Sequence[int], waiting: int, buckets: Sequence[int],
                        plain_ms: PlainMs) -> tuple[float, ...] | None:
    """Per decoding request (batch order), the weight of its extra tokens (module docstring); `remaining`: per
    request, the tokens it may still generate. None (every weight 1) while a request waits for a slot, for a
    single request, when every request has the same work to go, without plain costs covering the batch, or when no
    exit saves anything."""
    B = len(remaining)
    if waiting > 0 or B <= 1:
        return None
    c = plain_curve(B, buckets, plain_ms)
    if c is None or min(remaining) == max(remaining):  # equal work to go: every request alike, each worth 1
        return None
    saves = [max(0.0, c[b] - c[b - 1]) for b in range(1, B + 1)]  # saves[k]: leaving with k + 1 running
    expected = [sum(p * s for p, s in zip(dist, saves)) for dist in rank_probabilities(remaining)]
    total = sum(expected)
    if total <= 0.0:
        return None
    return tuple(B * e / total for e in expected)
