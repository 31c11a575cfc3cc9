"""Speculative verification with a point-mass (greedy) draft proposal (R-B2, R-B3).

Vocabulary, per request of a round that verifies `L` draft tokens d_1..d_L after the newest
committed token t_n:
- the target reads rows [t_n, d_1, ..., d_L] and every row r is *sampled* from the target's
  filtered distribution for that request (greedy rows: argmax) giving y_0..y_L; y_j is the
  target's token for the position after row j.
- **accepted**: d_j for j = 1..m, where m is the largest count with d_j == y_{j-1} for all j <= m.
- **replacement**: y_m when m < L (the first sample that disagreed with the draft).
- **bonus**: y_L when m == L (every draft token accepted; the last row's sample is free).
The request commits d_1..d_m followed by y_m: m + 1 tokens.

Why this is exact: the draft proposes a point mass on d_j, so rejection sampling accepts it with
probability p_t(d_j), which is precisely the probability that a sample y ~ p_t equals d_j; on
rejection the residual distribution is p_t with d_j removed and renormalised, which is the law of
y conditioned on y != d_j. Hence "accept while the sample equals the draft; the first mismatch is
the replacement" produces tokens distributed exactly as the target, for any temperature, top-k,
top-p and min-p applied to p_t first (and reduces to argmax matching for greedy rows).
"""

from __future__ import annotations

import torch


def count_accepted(
    draft_tokens: torch.Tensor,  # [B, K] int64, -1 where a request verifies fewer than K tokens
    target_tokens: torch.Tensor,  # [B, K + 1] int64, y_0..y_K (entries past a request's rows unused)
    verify_lens: torch.Tensor,  # [B] int64, L_b <= K
) -> torch.Tensor:  # [B] int64, m_b
    """Number of leading draft tokens each request accepts (no host sync)."""
    K = draft_tokens.shape[1]
    if K == 0:
        return torch.zeros(draft_tokens.shape[0], dtype=torch.long, device=draft_tokens.device)
    in_range = torch.arange(K, device=draft_tokens.device)[None, :] < verify_lens[:, None]
    match = (draft_tokens == target_tokens[:, :K]) & in_range
    return match.long().cumprod(dim=1).sum(dim=1)


def count_accepted_host(drafts: list[list[int]], y: list[int], lens: list[int], is_decode: list[bool],
                        n_sampled: list[int]) -> list[int]:
    """`count_accepted` over host lists (the CPU round runner): per decoding request, the number of leading
    draft tokens d_1..d_L equal to the target's samples y_0..y_{L-1} of its rows."""
    out, yi, b = [], 0, 0
    for dec, n in zip(is_decode, n_sampled):
        if dec:
            d, L, m = drafts[b], lens[b], 0
            while m < L and d[m] == y[yi + m]:
                m += 1
            out.append(m)
            b += 1
        yi += n
    return out
