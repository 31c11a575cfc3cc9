"""Random-target speculative decoding preserves the target distribution (R-B3).

A crafted Markov "target" over 6 tokens (one logits row per previous token) and a *different*
crafted greedy draft. Speculative rounds (k = 2 drafts) use the engine's own pieces: `sample`
for every verified row under the request's temperature / top-k / top-p / min-p, and
`count_accepted` for acceptance. The empirical law of the first two emitted tokens must match the
exact filtered target law (chi-square, p = 0.001), and a deliberately broken acceptance rule
(accept a draft token whenever the target allows it, "typical acceptance") must be caught by the
same test.

The target's logits go through a linear layer of each lossless backend (issue 14: fp32 and fp16w,
`linear_backend` fixture): logits = lm_head(h_prev) with h_prev a fixed feature row per previous
token and lm_head fitted so that fp32 reproduces TARGET. The exact law is computed from single-row
products (what plain decoding computes), the speculative rounds multiply all verified rows of all
sequences at once (what a verify computes).
"""

from __future__ import annotations


import pytest
import torch

from adaspec.sampling.sampler import SamplingTensors, filtered_logprobs, sample
from adaspec.sampling.verify import count_accepted
from adaspec.sampling.verify_rows import RowGroup, sample_rows_until_rejected
from adaspec.sampling_params import SamplingParams

V, K, N = 6, 2, 30000
TARGET = torch.tensor([
    [2.0, 1.5, 0.5, 0.0, -1.0, 1.0],
    [0.3, 2.2, 1.9, -0.5, 0.0, 0.8],
    [1.0, 0.2, 1.1, 1.6, -2.0, 0.4],
    [0.0, 0.0, 0.9, 1.4, 1.2, -0.3],
    [1.7, -1.0, 0.6, 0.6, 2.0, 0.1],
    [0.5, 1.5, 0.4, 1.3, 0.2, 1.0],
])
DRAFT_NEXT = [1, 2, 3, 4, 0, 3]  # greedy draft: a deterministic successor (often not the target's mode)
START = 0
# chi-square critical values at p = 0.001 by degrees of freedom
CHI2_CRIT = {5: 20.52, 10: 29.59, 15: 37.70, 20: 45.31, 24: 51.18, 25: 52.62, 30: 59.70, 35: 66.62}


def lm_head(backend: str):
    """(batched logits function of previous tokens, the exact [V, V] table from one row at a time)."""
    from torch import nn

    from adaspec.models.linear import pack_module

    g = torch.Generator().manual_seed(7)
    h = torch.randn(V, 32, generator=g)
    layer = nn.Linear(32, V, bias=False)
    with torch.no_grad():
        layer.weight.copy_((torch.linalg.pinv(h) @ TARGET).t())  # h @ W^T = TARGET in exact arithmetic
    holder = nn.Module()
    holder.head = layer
    pack_module(holder, backend)
    with torch.inference_mode():
        table = torch.cat([holder.head(h[i:i + 1]) for i in range(V)])
    return (lambda prev: holder.head(h[prev])), table


def _params():
    return SamplingParams(temperature=0.9, top_k=5, top_p=0.95, min_p=0.05)


def exact_two_token_law(params, table=TARGET) -> torch.Tensor:
    t = SamplingTensors.from_params([params] * V)
    q = filtered_logprobs(table, t).exp()  # [prev, next]
    return q[START][:, None] * q  # [a, b] = q(a | START) q(b | a)


def speculative_two_tokens(params, broken: bool = False, seed: int = 0, target=None,
                           until_rejected: bool = False) -> torch.Tensor:
    """Emit tokens by speculative rounds until each of N sequences has two; returns [N, 2].
    `target`: previous tokens [R] -> logits [R, V] (default: rows of TARGET). `until_rejected`: sample
    the rows as the CPU round runner does (verify_rows.py: depth by depth, none after a rejection)."""
    target = target or (lambda prev: TARGET[prev])
    g = torch.Generator().manual_seed(seed)
    prev = torch.full((N,), START)
    emitted = [[] for _ in range(N)]
    active = torch.arange(N)
    while len(active):
        p = prev[active]
        d1 = torch.tensor(DRAFT_NEXT)[p]
        d2 = torch.tensor(DRAFT_NEXT)[d1]
        drafts = torch.stack([d1, d2], dim=1)  # [B, K]
        rows = torch.stack([p, d1, d2], dim=1).reshape(-1)  # target reads [t_n, d1, d2]
        logits = target(rows)
        t = SamplingTensors.from_params([params] * len(rows))
        lens = torch.full((len(p),), K)
        if until_rejected:
            groups = [RowGroup(i * (K + 1), d) for i, d in enumerate(drafts.tolist())]
            y_host = sample_rows_until_rejected(logits, groups, [params] * len(rows), [0] * len(rows), g)
            y = torch.tensor(y_host).view(-1, K + 1)
        else:
            y = sample(logits, t, default_generator=g).view(-1, K + 1)
        if broken:  # typical-acceptance-like: accept while the target merely allows the draft token
            allowed = filtered_logprobs(logits, t).view(-1, K + 1, V).gather(2, drafts[:, :, None]).squeeze(2) > -1e9
            m = allowed.long().cumprod(1).sum(1)
        else:
            m = count_accepted(drafts, y, lens)
        for i, (row, mi) in enumerate(zip(active.tolist(), m.tolist())):
            toks = drafts[i, :mi].tolist() + [int(y[i, mi])]
            emitted[row] += toks
            prev[row] = toks[-1]
        active = torch.tensor([r for r in active.tolist() if len(emitted[r]) < 2], dtype=torch.long)
    return torch.tensor([e[:2] for e in emitted])


def chi_square(samples: torch.Tensor, law: torch.Tensor) -> tuple[float, int]:
    counts = torch.zeros(V, V)
    for a, b in samples.tolist():
        counts[a, b] += 1
    expected = law * len(samples)
    keep = expected > 5  # cells with tiny expectation are pooled into one
    stat = (((counts - expected) ** 2)[keep] / expected[keep]).sum()
    rest_obs, rest_exp = counts[~keep].sum(), expected[~keep].sum()
    dof = int(keep.sum()) - 1
    if rest_exp > 0:
        stat += (rest_obs - rest_exp) ** 2 / rest_exp
        dof += 1
    # impossible cells must never be observed
    assert counts[law == 0].sum() == 0, "a token outside the filtered target support was emitted"
    return float(stat), dof


def _critical(dof: int) -> float:
    # Wilson-Hilferty approximation of the p = 0.001 quantile for dofs not in the table
    if dof in CHI2_CRIT:
        return CHI2_CRIT[dof]
    z = 3.0902
    return dof * (1 - 2 / (9 * dof) + z * (2 / (9 * dof)) ** 0.5) ** 3


def test_speculative_sampling_matches_target_law(linear_backend):
    params = _params()
    target, table = lm_head(linear_backend)
    assert (table - TARGET).abs().max() < 0.05  # the fitted head reproduces the crafted target
    law = exact_two_token_law(params, table)
    stat, dof = chi_square(speculative_two_tokens(params, target=target), law)
    assert stat < _critical(dof), f"chi2={stat:.1f} dof={dof}"


def test_rows_sampled_until_the_first_rejection_keep_the_target_law(linear_backend):
    """The CPU round runner samples a request's verify rows only up to its first rejection
    (sampling/verify_rows.py), drawing unseeded rows' noise from the engine's generator as it goes: the
    emitted law must still be the target's."""
    params = _params()
    target, table = lm_head(linear_backend)
    law = exact_two_token_law(params, table)
    stat, dof = chi_square(speculative_two_tokens(params, target=target, until_rejected=True, seed=3), law)
    assert stat < _critical(dof), f"chi2={stat:.1f} dof={dof}"


def test_broken_acceptance_rule_is_detected(linear_backend):
    """The same test must reject a rule that is known to bias the output."""
    params = _params()
    target, table = lm_head(linear_backend)
    law = exact_two_token_law(params, table)
    stat, dof = chi_square(speculative_two_tokens(params, broken=True, target=target), law)
    assert stat > _critical(dof), f"broken rule not detected: chi2={stat:.1f} dof={dof}"


@pytest.mark.parametrize("params", [SamplingParams(temperature=0)])
def test_greedy_rows_accept_only_the_argmax(params):
    """R-B2: with a greedy target the output is the target argmax chain, whatever the draft."""
    out = speculative_two_tokens(params)[:50]
    a = int(TARGET[START].argmax())
    b = int(TARGET[a].argmax())
    assert all(row == [a, b] for row in out.tolist())
