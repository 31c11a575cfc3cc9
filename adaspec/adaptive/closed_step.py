"""The adaptive draft step in a closed batch: throughput of the batch's remaining work (issue 13; adaspec's
extension of R-C1).

R-C1 scores a step count k by the tokens a round yields per ms, B (1 + sum(a[:k])) / cost(B, k), as if
every request accepted the batch's average. While requests wait for a slot that is right: a request that
finishes early hands its slot on. With nothing waiting it is not: the batch's work ends with its last
request, and the requests the draft suits best finish first and leave the others to run in a smaller,
cheaper, but no longer shared round. Measured (bench/results/s41/per_request.md): four mixed held-out
prompts at MTP k = 1, 256 tokens each, finish after 133, 151, 185 and 188 rounds, where the batch's
average acceptance (1.59 tokens per round) says 161. Priced with the step table, that drain turns R-C1's
+2.9% for k = 1 into -2.7% (measured: 0.95x plain), and the draft step ran k = 1 in a quarter to a half
of its rounds there (0.96-0.98x plain, BENCHMARKS.md stops 40-41).

So when no request waits (`closed`: per decoding request, its remaining tokens n_i and its acceptance
relative to the batch's, rho_i), k is scored by the time to finish the remaining work at k:
request i advances 1 + A_i(k) tokens per round, A_i(k) = min(k, rho_i * sum(a[:k])), and finishes after
f_i = n_i / (1 + A_i(k)) rounds; between consecutive finishes the round holds the requests not yet done,
at the table's cost for that many requests, so

    T(k) = sum_j (f_(j) - f_(j-1)) * cost(B - j + 1, k),      f_(0) = 0, f sorted ascending,

and the score is sum(n_i) / T(k), tokens per ms as R-C1's (the same argmax when every rho_i = 1 and
every n_i is equal: then all finish together). rho_i comes from the request's own verified draft tokens,
shrunk towards 1 (engine/control.py), or, with the controller's per-request window (policy.per_request), it
depends on k: rho_i(k) = sum(a_i[:k]) / mean_j sum(a_j[:k]), a_i request i's own shrunk prefix acceptance
(batch_acceptance.py), so that a request that rarely survives one position is not priced as surviving two at
the batch's depth profile (with the engine's single rho, the mixed cell at B = 4 chose k = 2 in 12% of its
rounds and ran 0.957x plain: BENCHMARKS.md stop 43); the controller uses this score only once every request
has step_policy.CLOSED_MIN_DRAFTS drafts in the window (before, the per-round score); n_i is max_tokens minus what it has generated, an upper bound
when an end-of-sequence token stops it earlier. The model keeps k fixed for the rest of the batch: it
prices what k does to the batch's end, not the later choices a smaller batch will make.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

TableAt = Callable[[int], "dict[int, float]"]  # requests still running -> {k: ms}


def spec_tokens(prefix_acceptance: Sequence[float], k: int) -> float:
    """sum(prefix_acceptance[:k]): a round's expected accepted draft tokens per request, with np.sum's bits (which adds
    fewer than 8 float64 values in order, more pairwise) but below 8 without numpy: a re-score sums it a dozen times,
    with the caches cold after the target's forward, and each numpy call costs more than the additions."""
    if k >= 8:
        return float(np.sum(np.asarray(prefix_acceptance, dtype=np.float64)[:k]))
    total = 0.0
    for x in prefix_acceptance[:k]:
        total += float(x)
    return total


def closed_throughput(prefix_acceptance: Sequence[float], k: int, closed: Sequence[tuple[int, float]],
                      table_at: TableAt) -> float:
    """Tokens per ms of the batch's remaining work at k draft steps (module docstring); `closed`: per request,
    (remaining tokens, relative acceptance); `table_at(b)`: the cost table for b running requests."""
    if not closed:
        raise ValueError("closed needs at least one request")
    spec = spec_tokens(prefix_acceptance, k)
    # Python floats (a handful of requests; the same IEEE operations numpy's elementwise ones were)
    n = [float(max(0, int(r))) for r, _ in closed]
    finish = []
    for remaining, (_, rho) in zip(n, closed):
        rho = rho if np.isscalar(rho) else (rho[k - 1] if k else 1.0)
        finish.append(remaining / (1.0 + min(float(k), max(0.0, float(rho)) * spec)))
    finish.sort()
    total_ms, before = 0.0, 0.0
    for j, f in enumerate(finish):
        running = len(finish) - j
        total_ms += (f - before) * table_at(running)[k]
        before = f
    return math.fsum(n) / total_ms if total_ms > 0 else 0.0
