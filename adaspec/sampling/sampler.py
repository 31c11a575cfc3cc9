"""Vectorised token sampler (R-I1), also used to verify speculative rows (R-B3).

Every row of the logits is independent ("rows are just rows"): a request that verifies k
draft tokens simply contributes k+1 rows, each carrying that request's parameters.

Filter order, per random row (temperature > 0):

1. temperature scaling: ``x = logits / temperature``;
2. top-k: keep tokens whose scaled logit is >= the k-th largest (ties with the k-th token are
   all kept, so the result never depends on sort order); ``top_k = 0`` disables it;
3. top-p (nucleus): on the *top-k-filtered, temperature-scaled* distribution, renormalised,
   keep the smallest set of most likely tokens whose mass reaches ``top_p``: a token survives
   iff the mass of tokens strictly more likely than it is < ``top_p`` (so the top token always
   survives and ties at the boundary survive together); ``top_p = 1`` disables it;
4. min-p: keep tokens with ``p >= min_p * p_max``, ``p_max`` being the max probability of the
   distribution after the previous filters (they never remove the top token, so this is the
   ratio ``exp(x - x_max) >= min_p``); ``min_p = 0`` disables it;
5. renormalise (softmax over the survivors; removed tokens have probability 0 / logprob -inf);
6. sample.

Greedy rows (temperature == 0) take the argmax of the *raw* logits and ignore every filter.

Sampling uses the exponential race: ``argmax_i p_i / E_i`` with ``E_i ~ Exponential(1)`` i.i.d.
is distributed exactly as ``p``, so a whole batch is sampled by one vectorised op. A row with
its own ``torch.Generator`` draws its noise from it, so a seeded request samples the same token
whatever the rest of the batch is. The noise is ``E = -log(1 - U)`` from float64 uniforms
(`exponential_noise`): ``Tensor.exponential_`` took 0.80 ms per 49152-token row on one CPU thread,
``rand`` + ``log1p`` takes 0.29 ms, and a speculative round sampled 1 + k rows per request, so the
old noise made T > 0 rounds dearer than the greedy cost tables say (issue 13). On CPU the round runner
now samples a request's rows only up to its first rejection (verify_rows.py): one random row per
committed token, as in plain decoding. The race itself (`race`) computes the logarithm only for the
few tokens that can win (-log(1 - U) >= U bounds every ratio): 0.10-0.12 instead of 0.41 ms per row after
the uniforms (0.34 ms) and the softmax (0.08 ms), with the same winners (bench/results/s39/race_row.py).

Why not inverse-transform sampling (one uniform per row, a cumulative sum), which is cheaper
still: it moves its pick whenever ``u`` lands in mass shifted by last-bit logit differences, the
race only at a near-tie of its top two ratios. Before models/attention.py read keys in whole
KEY_BLOCKs, a verify row's logits were up to 7.4e-5 from the plain row's; on those real pairs the
inverse transform moved 138 of 192000 seeded draws and the race none (bench/sampling_cost.py
--parts=robustness). Rows are bit-identical now on the row-independent backends, but fp32 (MKL)
products still depend on the row count, so the race stays: seeded speculative output equals
seeded plain output (R-B5).
On accelerators nothing here syncs with the host (no ``.item()``); on the CPU, where there is no
transfer to save, the race and the greedy argmax read rows through numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from adaspec.sampling_params import SamplingParams

_NEG_INF = float("-inf")


@dataclass
class SamplingTensors:
    temperature: Tensor  # [R] float32, 0 = greedy
    top_k: Tensor  # [R] int64, 0 = off
    top_p: Tensor  # [R] float32, 1 = off
    min_p: Tensor  # [R] float32, 0 = off
    # Python-level flags (computed over the random rows) so disabled filters cost nothing.
    all_greedy: bool
    any_top_k: bool
    any_top_p: bool
    any_min_p: bool
    max_top_k: int = 0  # largest top_k over random rows (lets top-k alone use topk, not sort)

    @classmethod
    def from_params(
        cls, params_per_row: list[SamplingParams], device: torch.device | str = "cpu"
    ) -> "SamplingTensors":
        temps = [float(p.temperature) for p in params_per_row]
        top_ks = [max(int(p.top_k), 0) for p in params_per_row]  # -1 -> 0 (off)
        top_ps = [float(p.top_p) for p in params_per_row]
        min_ps = [float(p.min_p) for p in params_per_row]
        rand = [i for i, t in enumerate(temps) if t > 0.0]
        return cls(
            temperature=torch.tensor(temps, dtype=torch.float32, device=device),
            top_k=torch.tensor(top_ks, dtype=torch.int64, device=device),
            top_p=torch.tensor(top_ps, dtype=torch.float32, device=device),
            min_p=torch.tensor(min_ps, dtype=torch.float32, device=device),
            all_greedy=not rand,
            any_top_k=any(top_ks[i] > 0 for i in rand),
            any_top_p=any(top_ps[i] < 1.0 for i in rand),
            any_min_p=any(min_ps[i] > 0.0 for i in rand),
            max_top_k=max((top_ks[i] for i in rand), default=0),
        )

    def select_rows(self, index: Tensor) -> "SamplingTensors":
        """Rows ``index`` (e.g. the request of each verify row); flags stay conservative."""
        return SamplingTensors(
            self.temperature[index], self.top_k[index], self.top_p[index], self.min_p[index],
            self.all_greedy, self.any_top_k, self.any_top_p, self.any_min_p, self.max_top_k,
        )


def _filtered_logits(logits: Tensor, t: SamplingTensors) -> Tensor:
    """Temperature-scaled logits with filtered-out tokens at -inf (random-row semantics)."""
    greedy = t.temperature == 0.0
    x = logits.float() / torch.where(greedy, 1.0, t.temperature).unsqueeze(1)
    vocab = x.shape[-1]

    if t.any_top_k or t.any_top_p:
        on_k = t.top_k > 0
        if t.any_top_p:
            sorted_x = x.sort(dim=-1, descending=True).values
            ranked = sorted_x
        else:  # top-k only: a partial top-k is enough
            ranked = x.topk(min(t.max_top_k, vocab), dim=-1).values
        if t.any_top_k:
            k = t.top_k.clamp(1, ranked.shape[-1])
            kth = ranked.gather(1, (k - 1).unsqueeze(1))
            kth = torch.where(on_k.unsqueeze(1), kth, _NEG_INF)
            x = x.masked_fill(x < kth, _NEG_INF)
        if t.any_top_p:
            if t.any_top_k:
                sorted_x = sorted_x.masked_fill(sorted_x < kth, _NEG_INF)
            probs = sorted_x.softmax(dim=-1)
            # mass of the strictly-earlier tokens (exclusive cumsum, non-decreasing)
            cum = probs.cumsum(dim=-1)
            mass_before = torch.cat([torch.zeros_like(cum[:, :1]), cum[:, :-1]], dim=-1)
            keep = mass_before < t.top_p.unsqueeze(1)
            n_keep = keep.sum(dim=-1).clamp(min=1)
            cutoff = sorted_x.gather(1, (n_keep - 1).unsqueeze(1))
            cutoff = torch.where((t.top_p >= 1.0).unsqueeze(1), _NEG_INF, cutoff)
            x = x.masked_fill(x < cutoff, _NEG_INF)

    if t.any_min_p:
        x_max = x.max(dim=-1, keepdim=True).values
        x = x.masked_fill(x < x_max + t.min_p.log().unsqueeze(1), _NEG_INF)
    return x


def first_argmax(x: Tensor) -> Tensor:
    """Index of the largest value of each row (the first one on ties), like `argmax(dim=-1)`.

    `max(dim=-1).indices` is documented to return the same first index; on CPU it is ~5x faster than
    `argmax` over a vocabulary-sized row (2.9 vs 14 ms for [128, 49152] float32 on one thread), which
    was 15 ms of a 128-row verify round. numpy's `argmax` (also the first index, and NaN like torch: the
    first NaN wins) is vectorised where torch's index-tracking max is not: 6-12 vs 52-58 us per 49152-token
    float32 row on a Zen 2 core (bench/results/s39/race_row.py), so float32 rows on the CPU take it
    (zero-copy views)."""
    if x.device.type == "cpu" and x.dtype == torch.float32 and x.dim() == 2 and x.shape[1] > 0:
        return torch.from_numpy(x.detach().contiguous().numpy().argmax(axis=1))
    return x.max(dim=-1).indices


def _greedy_logprobs(logits: Tensor) -> Tensor:
    out = torch.full_like(logits, _NEG_INF, dtype=torch.float32)
    return out.scatter_(1, first_argmax(logits).unsqueeze(1), 0.0)


def filtered_logprobs(logits: Tensor, t: SamplingTensors) -> Tensor:
    """[R, V] log-probabilities of each row's filtered target distribution (masked = -inf).

    Greedy rows are a point mass on the raw argmax (0 there, -inf elsewhere).
    """
    if t.all_greedy:
        return _greedy_logprobs(logits)
    logp = _filtered_logits(logits, t).log_softmax(dim=-1)
    greedy = (t.temperature == 0.0).unsqueeze(1)
    return torch.where(greedy, _greedy_logprobs(logits), logp)


def sample(
    logits: Tensor,
    t: SamplingTensors,
    generators: list[torch.Generator | None] | None = None,
    *,
    default_generator: torch.Generator | None = None,
) -> Tensor:
    """[R] int64 token per row: greedy rows -> argmax of raw logits; random rows -> a sample
    of the filtered distribution. ``generators[i]`` (if given) drives row i's noise; other
    rows use ``default_generator`` or the global RNG."""
    greedy_tok = first_argmax(logits)
    if t.all_greedy:
        return greedy_tok
    probs = _filtered_logits(logits, t).softmax(dim=-1)

    row_gens = generators if generators and any(g is not None for g in generators) else None
    if row_gens is None or any(g is None for g in row_gens):
        u = torch.rand(probs.shape, dtype=torch.float64, generator=default_generator, device=probs.device)
    else:
        u = torch.empty(probs.shape, dtype=torch.float64, device=probs.device)
    if row_gens is not None:
        assert len(row_gens) == probs.shape[0], "one generator (or None) per row"
        for i, g in enumerate(row_gens):
            if g is not None:
                u[i] = torch.rand(probs.shape[1:], dtype=torch.float64, generator=g, device=probs.device)
    random_tok = race(probs, u) if probs.device.type == "cpu" else first_argmax(probs / _noise(u))
    return torch.where(t.temperature == 0.0, greedy_tok, random_tok)


_TINY = torch.finfo(torch.float32).tiny


def _noise(u: Tensor) -> Tensor:
    """float32 Exponential(1) noise -log(1 - U) from float64 uniforms U (clamped to the smallest normal
    float32: E == 0 would give inf / nan in the race)."""
    return u.neg().log1p_().neg_().to(torch.float32).clamp_(min=_TINY)


def exponential_noise(shape, generator: torch.Generator | None, device) -> Tensor:
    """float32 Exponential(1) noise as -log(1 - U), U uniform in [0, 1) in float64: finite, and
    the 53-bit uniform keeps the smallest E values (where a rare token wins the race) resolved."""
    return _noise(torch.rand(shape, dtype=torch.float64, generator=generator, device=device))


def race(probs: Tensor, u: Tensor) -> Tensor:
    """[R] the exponential race's winner per row, argmax_i p_i / E_i (first index on ties), with
    E_i = max(f32(-log1p(-u_i)), tiny), computing the logarithm only where it can matter (CPU).

    The logarithm of every uniform was a third of a random row's cost (0.28 of 0.90 ms over 49152 tokens,
    bench/results/s38/sampling_row.py). Since -log(1 - u) >= u, p_i / u_i bounds each ratio from above: up
    to float rounding (float32 u: 2^-24 relative; the float64 logarithm and the float32 E and quotient: a
    few ulp), fl(p_i / E_i) <= fl(p_i / fl32(u_i)) (1 + 2^-21). The bound's argmax gives one exact ratio
    M0 <= the race's maximum; only the tokens whose bound reaches M0 (1 - 2^-15) can win or tie, typically
    one to a few per row, and their E_i are computed exactly. A u_i below the smallest float32 normal
    (never from torch.rand's 53-bit grid, but allowed) is clamped like E_i, which keeps the bound.

    The candidates' logarithms are Python's math.log1p, one value at a time: a vectorised logarithm takes
    other code paths for a call's last few elements, which would make a token depend on how many
    candidates the other rows of the call had. So the winner is a function of the row's p and u alone
    (seeded rows: of (seed, position), R-B5). It can differ from the vectorised full computation
    (`first_argmax(probs / _noise(u))`, the accelerators' path) only where the two logarithms differ in the
    last bit at a near-tie of the two best ratios: the same law, not always the same bits."""
    P = probs.detach().contiguous().numpy()
    U = u.detach().contiguous().numpy()
    bound = np.maximum(U.astype(np.float32), _TINY)
    np.divide(P, bound, out=bound)
    winners = []
    for r, g in enumerate(bound.argmax(axis=1).tolist()):  # numpy's argmax: the first index on ties
        floor = np.float32(_ratio(float(P[r, g]), float(U[r, g])) * (1.0 - 2.0 ** -15))
        best, best_c = -1.0, g
        for c in np.flatnonzero(bound[r] >= floor).tolist():  # increasing index: a later equal ratio loses
            q = _ratio(float(P[r, c]), float(U[r, c]))
            if q > best:
                best, best_c = q, c
        winners.append(best_c)
    return torch.tensor(winners, dtype=torch.long)


def _ratio(p: float, u: float) -> float:
    """fl32(p / E) with E = max(fl32(-log1p(-u)), tiny), as the race computes it in float32."""
    e = float(np.float32(-math.log1p(-u)))
    return float(np.float32(p) / np.float32(max(e, _TINY)))


__all__ = ["SamplingTensors", "filtered_logprobs", "first_argmax", "race", "sample"]
