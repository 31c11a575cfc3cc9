"""Adaptive target verify, the budget math: which drafted candidates the target verifies (R-D1, R-D3, R-D4, R-F6).

Pure functions over path probabilities and a cost function; `verify_controller.VerifyController`
holds the lagged feedback and calls them every round.

The draft always produces its full width w (R-D1); this module decides which drafted candidates
the target verifies. A candidate is (request b, position j), j = 1..w, with path probability
P[b, j] (scoring.path_probabilities). Verifying l_b drafts of request b costs 1 + l_b target rows
and is worth 1 + sum_{j <= l_b} P[b, j] predicted tokens (the 1 is the replacement/bonus token).

Ranking (the one order used everywhere): P descending, ties by position j (smaller first), then by
slot b (smaller first); never by token value. P is made non-increasing in j (running minimum; a
no-op for a cumprod of scores in [0, 1]), so for every candidate (b, j) its parent (b, j - 1) has
P >= P[b, j] and, on a tie, the smaller position: the parent always ranks first. Any set of the
first N ranked candidates is therefore a union of per-request prefixes, and verify lengths are
just the per-request counts of admitted candidates.

Two budget modes (both distribution-preserving for random targets, PRIOR_ART.md §5.3):
(a) `sync_admission` (DSpark Algorithm 1): start from l_b = 0 (G = B rows), admit in rank order
    while the predicted throughput (B + sum admitted P) / cost_ms(Bcap, pad_rows(Bcap, B + N))
    does not decrease, stop at the first decrease. Ties (equal throughput) admit, as Algorithm 1's
    `>=`: an admitted candidate always has P > 0, so an exact tie means a row predicted to be free,
    and taking it can only help if the predictor is pessimistic. Candidates with P = 0 are never
    admitted. The early stop is what keeps it lossless: whether (b, j) is admitted depends only on
    the candidates ranked before it, all of which have P >= P[b, j] and none of which is computed
    from the token at (b, j) (a deeper P[b, j + 1] is computed from it, but always ranks later).
    A retrospective argmax over all prefixes would let P[b, j + 1], i.e. the value of token
    (b, j), decide whether (b, j) is verified (the PRIOR_ART counter-example; tested).
(b) asynchronous (R-D4): `budget_from_lagged` picks the padded target rows G in advance, as the
    argmax over *all* prepared buckets (no early stop, so cliffs of the cost curve are searched
    past) of (B + E[top-(G - B) sum of P]) / cost_ms(Bcap, G), the expectation estimated from
    lagged rounds (n - 2 and earlier) only; ties go to the smaller G (same predicted throughput,
    fewer rows). Then `allocate_in_budget` gives the G - B extra rows to the top-ranked candidates
    of the *current* round, on the device, without a host sync. The current round's scores only
    rank candidates inside a budget they did not choose, so admission never depends on the value of
    the token being admitted. Inside G every row is paid for, so candidates with P = 0 are filled in
    too (rank order still decides which).

Scaling lagged rounds to the current B: a lagged round r with B_r requests gives a sorted
(descending) list v of its B_r * w path probabilities. Assuming the current requests draw their
candidates from the same per-request distribution, the top n of B * w current candidates
correspond to the top fraction n / (B w) of v, so E[top-n sum] ~ (B / B_r) * C_r(n B_r / B), with
C_r the cumulative sum of v linearly interpolated at fractional counts. With B_r = B this is the
exact top-n sum of that round. Several lagged rounds (`budget_window`, default 1: the newest
visible round, as DSpark's production scheduler) are averaged.

Token value (adaspec's extension, issue 13): both modes can weigh the predicted *extra* tokens by a
`token_value` v in [0, 1] (the B base tokens count fully): predicted throughput (B + v * sum P) /
cost. v < 1 is what the engine passes for a closed batch (adaptive/closed_batch.py); v is one host
number for the whole round, decided before it, so it changes how many rows are admitted, never which
candidate ranks first, and the early stop stays non-anticipating.

Cost coverage: `cost_ms(bcap, G)` returning None (not calibrated, R-F7), a G without a prepared
bucket, or the controller's optional `covers(bcap, kv_len)` saying no (e.g. CostTable.covers with
the batch's longest KV length) makes the round fall back to full width, and the decision says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from ..geometry import first_covering, unified_row_buckets
from .host_paths import clean_rows, top_sums

CostFn = Callable[[int, int], "float | None"]
PadRowsFn = Callable[[int, int], "int | None"]


# ---- shared pieces ---------------------------------------------------------------------------
def verify_caps(max_lens, B: int, w: int) -> np.ndarray:
    """Per request, the drafts it may verify (its max_lens entry clipped to [0, w]; w without max_lens)."""
    if max_lens is None:
        return np.full(B, w, dtype=np.int64)
    caps = np.asarray(max_lens.tolist() if isinstance(max_lens, torch.Tensor) else max_lens, dtype=np.int64)
    if caps.shape != (B,):
        raise ValueError(f"max_lens must have one entry per request ({B}), got shape {caps.shape}")
    return np.clip(caps, 0, w)


def rank_order(P: np.ndarray, max_lens=None) -> list[tuple[int, int]]:
    """Candidates (b, j0) (j0 = 0-based position) in rank order: P desc, then position, then slot.
    Only candidates with P > 0 inside each request's cap are listed."""
    rows = clean_rows(P)
    return _ranked(rows, cap_list(max_lens, len(rows), len(rows[0]) if rows else 0))


def cap_list(max_lens, B: int, w: int) -> list[int]:
    """verify_caps as a list (plain Python for the engine's list of caps, which the admission and the gate read every
    round: numpy's per-call overhead was most of the controller's time)."""
    if isinstance(max_lens, (list, tuple)) and len(max_lens) == B:
        return [min(max(int(c), 0), w) for c in max_lens]
    return verify_caps(max_lens, B, w).tolist()


def _ranked(paths: list[list[float]], caps: list[int], values: list[float] | None = None) -> list[tuple[int, int]]:
    """rank_order on clean path probabilities and caps, as Python lists (a sort of tuples: at the few dozen
    candidates of a round, numpy's meshgrid and lexsort were most of the admission's time; the order is the same);
    with per-request `values` that differ, by value times probability (a prefix of each row still ranks before its
    rest); equal values leave the order to the probabilities alone, bit for bit."""
    if values is not None and min(values) != max(values):
        ranked = sorted((-values[b] * p, j, b) for b, row in enumerate(paths) for j, p in enumerate(row[:caps[b]])
                        if p > 0)
        return [(b, j) for _, j, b in ranked]
    ranked = sorted((-p, j, b) for b, row in enumerate(paths) for j, p in enumerate(row[:caps[b]]) if p > 0)
    return [(b, j) for _, j, b in ranked]


# One definition of the bucket rules for the whole code base (R-F6)
unified_buckets = unified_row_buckets


@dataclass(frozen=True)
class AdmissionDecision:
    verify_lens: list[int]  # [B] drafts each request verifies (a prefix of its w candidates)
    G: int | None  # padded target rows pad_rows(bcap, B + sum(verify_lens))
    predicted: float | None  # predicted tokens per ms (None on fallback)
    reason: str  # "early stop", "all candidates admitted", "fallback: ..."


def _padded_cost(bcap: int, cost_ms: CostFn, pad_rows: PadRowsFn) -> Callable[[int], "float | None"]:
    """rows -> ms of a round at bcap with those rows padded to their prepared bucket (None where no
    bucket or no cost covers them), each bucket's cost looked up once."""
    costs: dict[int, float | None] = {}

    def cost_of(rows: int) -> float | None:
        G = pad_rows(bcap, rows)
        if G is None:
            return None
        if G not in costs:
            costs[G] = cost_ms(bcap, G)
        return costs[G]
    return cost_of


def sync_admission(P, bcap: int, cost_ms: CostFn, pad_rows: PadRowsFn, max_lens=None,
                   token_value: float | Sequence[float] = 1.0) -> AdmissionDecision:
    """DSpark Algorithm 1 with early stop (R-D3a). Uses the host (P may be a device tensor). `token_value`: the
    weight of the extra tokens, one for the batch or one per request (adaptive/closed_batch.py); a request's
    candidates rank by weight times path probability, so a weight changes only which prefixes are admitted."""
    rows_p = clean_rows(P)
    B, w = len(rows_p), len(rows_p[0]) if rows_p else 0
    caps = cap_list(max_lens, B, w)
    values = [float(token_value)] * B if isinstance(token_value, (int, float)) else [float(v) for v in token_value]
    if len(values) != B:
        raise ValueError(f"token_value: {len(values)} weights for {B} requests")
    cost_of = _padded_cost(bcap, cost_ms, pad_rows)

    def full_width(why: str) -> AdmissionDecision:
        lens = list(caps)
        return AdmissionDecision(lens, pad_rows(bcap, B + sum(lens)), None, f"fallback: {why}; full width")

    c = cost_of(B)
    if c is None:
        return full_width(f"cost not covered at bcap={bcap}, rows={B}")
    best, tau, rows = B / c, float(B), B
    lens = [0] * B
    reason = "all candidates admitted"
    for b, j in _ranked(rows_p, caps, values):
        assert lens[b] == j, "rank order must respect prefixes"
        c = cost_of(rows + 1)
        if c is None:
            return full_width(f"cost not covered at bcap={bcap}, rows={rows + 1}")
        gain = values[b] * rows_p[b][j]
        theta = (tau + gain) / c
        if theta < best:
            reason = "early stop"
            break
        best, tau, rows = theta, tau + gain, rows + 1
        lens[b] = j + 1
    return AdmissionDecision(lens, pad_rows(bcap, rows), best, reason)


# ---- (b) asynchronous budget + allocation ----------------------------------------------------
def expected_top_sums(lagged_P: Sequence, B: int, w: int) -> list[float]:
    """[B * w + 1]: estimated E[sum of the top n current path probabilities], n = 0..B*w, from lagged
    rounds scaled to B requests (module docstring), averaged over the rounds (host_paths.top_sums: lists)."""
    return top_sums(lagged_P, B, w)


@dataclass(frozen=True)
class BudgetDecision:
    G: int  # padded target rows for the round
    predicted: dict[int, float] = field(default_factory=dict)  # G -> predicted tokens per ms
    reason: str = "argmax"  # "argmax", "plain" or "fallback: ..."


def budget_drafts(reason: str, G: int, B: int) -> bool:
    """Whether a budget decision (its reason and rows G, for B requests) is worth a draft: a fallback
    (full width) or an argmax above one row per request. "plain", or an argmax at G = B, admits no
    candidate: the plain floor skips that round's draft (adaptive/floor.py)."""
    return reason.startswith("fallback") or (reason.startswith("argmax") and G > B)


def full_width_rows(B: int, w: int, buckets: Sequence[int]) -> int:
    G = first_covering(buckets, B * (w + 1))
    if G is None:
        raise ValueError(f"no prepared target bucket covers full width B*(w+1) = {B * (w + 1)}: {sorted(buckets)}")
    return G


def budget_from_lagged(
    lagged_P: Sequence,
    B: int,
    bcap: int,
    cost_ms: CostFn,
    target_buckets: dict[int, Sequence[int]],
    *,
    width: int | None = None,
    max_candidates: int | None = None,
    plain_cost: float | None = None,
    token_value: float = 1.0,
) -> BudgetDecision:
    """R-D4: G = argmax over every prepared bucket G >= B of predicted throughput from lagged path
    probabilities (no early stop). `width` is needed only when `lagged_P` is empty; the optional
    `max_candidates` caps the drafts that can be verified (e.g. requests near max_tokens).

    With `plain_cost` (ms of a plain round at this bucket, no draft: the plain floor, issue 13) not
    drafting at all is one more candidate, B / plain_cost; when it wins (ties included: same
    predicted throughput, no draft) the decision is G = B with reason "plain"."""
    if bcap not in target_buckets:
        raise ValueError(f"request bucket {bcap} has no prepared target buckets")
    buckets = sorted(target_buckets[bcap])
    if width is None:
        if not lagged_P:
            raise ValueError("width is required when there is no lagged feedback")
        width = len(clean_rows(lagged_P[0])[0])
    full = full_width_rows(B, width, buckets)
    if not lagged_P:
        return BudgetDecision(full, {}, "fallback: no lagged feedback yet; full width")
    n_max = B * width if max_candidates is None else max(0, min(B * width, int(max_candidates)))
    S = expected_top_sums(lagged_P, B, width)
    predicted: dict[int, float] = {}
    for G in buckets:
        if G < B:
            continue
        c = cost_ms(bcap, G)
        if c is None:
            return BudgetDecision(full, {}, f"fallback: cost not covered at bcap={bcap}, G={G}; full width")
        predicted[G] = (B + token_value * S[min(G - B, n_max)]) / c
    G = max(predicted, key=lambda g: (predicted[g], -g))
    if plain_cost is not None and plain_cost > 0 and B / plain_cost >= predicted[G]:
        return BudgetDecision(B, {**predicted, 0: B / plain_cost}, "plain")
    return BudgetDecision(G, predicted, "argmax")


def sync_outcome(lagged_P: Sequence, B: int, bcap: int, cost_ms: CostFn, pad_rows: PadRowsFn, *, width: int,
                 max_candidates: int | None = None, token_value: float = 1.0) -> tuple[int, float, float] | None:
    """`sync_admission`'s early stop walked over the expected sorted path probabilities of `lagged_P`
    (`expected_top_sums`): (candidates n it admits, expected tokens B + token_value * S_n, cost in ms of the
    drafted round of B + n padded rows), or None when the drafted G = B round's cost is not covered."""
    n_max = B * width if max_candidates is None else max(0, min(B * width, int(max_candidates)))
    S = expected_top_sums(lagged_P, B, width)
    cost_of = _padded_cost(bcap, cost_ms, pad_rows)
    cost = cost_of(B)
    if cost is None:
        return None
    n, best = 0, B / cost
    while n < n_max:
        c = cost_of(B + n + 1)
        if c is None or (B + token_value * S[n + 1]) / c < best:
            break
        n, cost, best = n + 1, c, (B + token_value * S[n + 1]) / c
    return n, B + token_value * S[n], cost


def sync_gain_from_lagged(
    lagged_P: Sequence,
    B: int,
    bcap: int,
    cost_ms: CostFn,
    pad_rows: PadRowsFn,
    *,
    width: int,
    max_candidates: int | None = None,
    plain_cost: float | None = None,
    token_value: float = 1.0,
) -> BudgetDecision:
    """What a synchronous round would admit, predicted from lagged rounds: `sync_admission`'s early
    stop walked over the expected sorted path probabilities (`expected_top_sums`) instead of the
    current round's. The synchronous gate of the plain floor (adaptive/floor.py) uses it, so a round
    drafts only where the rule that will admit its candidates is predicted to add a row that pays:
    the asynchronous estimator searches past the cliffs of the cost curve (a row that crosses into
    the next prepared bucket pays for the whole bucket), which the early stop cannot. G is the padded
    rows the early stop reaches; reason "plain" when that admits nothing or a plain round is predicted
    at least as fast, "early stop" otherwise."""
    outcome = sync_outcome(lagged_P, B, bcap, cost_ms, pad_rows, width=width, max_candidates=max_candidates,
                           token_value=token_value)
    if outcome is None:
        return BudgetDecision(B, {}, f"fallback: cost not covered at bcap={bcap}, rows={B}")
    n, tokens, cost = outcome
    best = tokens / cost
    G = pad_rows(bcap, B + n)
    predicted = {G: best}
    if n == 0 or (plain_cost is not None and plain_cost > 0 and B / plain_cost >= best):
        return BudgetDecision(B, {**predicted, 0: B / plain_cost} if plain_cost else predicted, "plain")
    return BudgetDecision(G, predicted, "early stop")


def allocate_in_budget(P_current: torch.Tensor, G: int, max_lens: torch.Tensor | None = None) -> torch.Tensor:
    """Verify lengths [B] (int64, on P's device) giving the G - B extra rows to the top-ranked current
    candidates. Tensor ops only, no host sync (G and B are host ints decided in advance)."""
    B, w = P_current.shape
    if G < B:
        raise ValueError(f"budget G={G} is smaller than the batch B={B}: every request needs its row")
    n = min(G - B, B * w)
    device = P_current.device
    if n == 0 or w == 0:
        return torch.zeros(B, dtype=torch.long, device=device)
    P = torch.nan_to_num(P_current.float(), nan=0.0).clamp(0.0, 1.0)
    P = torch.cummin(P, dim=1).values  # non-increasing in j (no-op for a cumprod of [0, 1] scores)
    valid = None
    if max_lens is not None:
        valid = torch.arange(w, device=device)[None, :] < max_lens.to(device)[:, None]
        P = torch.where(valid, P, torch.full_like(P, -1.0))  # capped candidates rank last
    # Position-major flattening (index j * B + b) + a stable ascending sort of -P: equal P keep
    # index order, i.e. position first, then slot; the token values never enter.
    keys = (-P).t().reshape(-1)
    order = torch.sort(keys, stable=True).indices
    rank = torch.empty_like(order)
    rank[order] = torch.arange(B * w, device=device)
    admitted = (rank < n).view(w, B).t()
    if valid is not None:
        admitted &= valid
    return admitted.sum(dim=1)
