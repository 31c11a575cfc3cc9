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
is some request's). The admission weighs request
i's candidates by v_i (verify_budget's `token_value`, one per request): four requests with equal work
to go are all worth 1, as in an open stream (each may end the batch), while a request clearly ahead is
worth what its early exit saves, c(B) - c(B - 1) against c(B) / B (0.15 at B = 4 on the bundled model),
and the one likely last is worth more. So speculation goes to the requests that end the batch, which is
where it shortens it: the admission no longer hands its rows to the requests its draft is surest of
while the batch waits for the others (BENCHMARKS.md, 12-04: 4 requests with 256 tokens each, asynchronous
DSpark verify drafted in 61 of 244 rounds, each 1.5x the cost of a plain round, and shortened the batch by
11 rounds; it ran at 0.91-0.95x plain). A single weight for the batch, the first-to-leave value for
every request (stop 63's rule, `closed_batch_value`), kept four equal prose requests plain in 99% of
rounds where fixed L3 ran 1.09x plain. The values are worth what the rest of the batch would save running
plain; a tail that speculates saves less per token, so the likely last request's weight is an upper bound.

That weighs tokens linearly, which is right where the finishing points are uncertain, not at a tie that nothing
will spread: four requests with equal work to go that decode plain will finish together, and a round that drafts
gives them uneven gains (one accepts three drafts, another none), worth only what the smallest gain shortens the
batch by plus each leader's earlier exit. Whether the spread comes depends on the batch's own future: drafting in
most rounds spreads the gains over many rounds (every token counts), drafting now and then does not. So the draft
gate (whether this round drafts at all) weighs a closed batch's extra tokens by

    v_gate = f * v_drafts + (1 - f) * v_first,     f = the share of the batch's last GATE_WINDOW rounds that drafted,

with v_first the value of a request sure to leave first (`closed_batch_value`) and v_drafts the requests' weights
averaged over where the drafts will be accepted: each request's weight times its draft's expected accepted tokens
in its newest drafted round (the sum of its path probabilities; the batch's mean for a request not drafted yet),
over their sum. (Each request's own accepted drafts per round, the first try, are biased: the draws that put a
request ahead also raise its rate, and four alike prose requests' value fell to ~0.9 and kept them plain.) Rounds before the first
count as drafted, so a new batch starts at v_drafts (1 with equal work to go); a batch whose model says plain loses
weight with every plain round and stays plain. The gate's served opinions (verify_served.py: the cold allowance,
which gives the model its first rounds to judge by, and the realised gain, drafted rounds' measured tokens per ms
against plain rounds') apply while v_drafts >= SERVED_MIN_VALUE, whatever f: where the drafts land on requests
worth nearly a whole token, what the drafted rounds measurably commit is the batch's gain. Measured: the model's
prediction for four prose requests swung within +-10% of plain round to round (its drafts gain ~8%), and without
the realised opinion one plain verdict started the spiral (cd60eed, 93580a3: 11-13 drafted rounds, then plain). Measured (bench/results/s64): with the gate at 1 in closed
batches, four code requests drafted in 12-15% of rounds, each drafted round 1.45x a plain one, and ran 0.965x plain;
with stop 63's v_first alone, four prose requests stayed plain where fixed L3 ran 1.09x; without v_drafts, a mixed
batch kept drafting for its one prose request, by then far ahead and worth little, at 0.89x plain.

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
    without plain costs. The start-up log prints it per bucket (the low end of `closed_batch_values`)."""
    if waiting > 0 or B <= 1:
        return 1.0
    c = plain_curve(B, buckets, plain_ms)
    if c is None:
        return 1.0
    return min(1.0, max(0.0, (c[B] - c[B - 1]) * B / c[B]))


GATE_WINDOW = 16  # rounds over which the gate's drafted share f is counted (module docstring)
SERVED_MIN_VALUE = 0.7  # v_drafts from which a closed batch's drafts count whole (module docstring)


def gate_value(drafted_share: float, first_value: float, drafts_value: float = 1.0) -> float:
    """v_gate (module docstring): the draft gate's weight of a closed batch's extra tokens, from the share of its
    recent rounds that drafted, the value of a request sure to leave first and the requests' weights averaged over
    their acceptance (`drafts_value`)."""
    f = min(1.0, max(0.0, float(drafted_share)))
    return f * drafts_value + (1.0 - f) * first_value


def path_sum(scores: Sequence[float]) -> float:
    """A draft's expected accepted tokens from its per-position scores: the sum of their running products."""
    p, total = 1.0, 0.0
    for x in scores:
        p *= min(1.0, max(0.0, float(x)))
        total += p
    return total


def drafts_value(values: Sequence[float], confidences: Sequence[float]) -> float:
    """v_drafts (module docstring): per request its weight and its draft's expected accepted tokens (the sum of its
    path probabilities in its newest drafted round)."""
    total = sum(max(0.0, float(c)) for c in confidences)
    if total <= 0.0:
        return 1.0
    return sum(v * max(0.0, float(c)) for v, c in zip(values, confidences)) / total


# Gauss-Hermite points and weights (probabilists', normalised) over a request's finishing point: 16 put the rank
# probabilities within 1e-3 of 24 points' (which are exact to double precision on the cases tests/unit check)
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(16)
_WEIGHTS = _WEIGHTS / math.sqrt(2.0 * math.pi)


def rank_probabilities(remaining: Sequence[int]) -> list[list[float]]:
    """Per request i: [P(k others finish after it) for k = 0..B-1] under the module's prior: finishing points
    independent, normal with mean r and variance r + 1; given i's, the others' are a Poisson binomial, averaged over
    i's by Gauss-Hermite quadrature (0.05 ms at B = 4, 0.5 ms at B = 16 on the 2-core VM)."""
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
