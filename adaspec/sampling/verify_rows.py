"""Sample a round's verify rows only as deep as they can matter (random rows on the host path).

A request that verifies L draft tokens reads rows y_0..y_L and commits d_1..d_m, y_m (verify.py): the
rows after its first rejection are sampled and thrown away. A greedy row's sample is an argmax; a random
row's is a softmax and one float64 uniform and logarithm per vocabulary entry (sampler.py): 0.9 ms per
seeded 49152-token row against 0.11 ms greedy on a Zen 2 core (bench/results/s38/sampling_row.py). A
k-step round sampling all B(1 + k) rows therefore paid for (1 + k) random rows per request where plain
decoding pays one, whatever the acceptance: at temperature 0.8 and acceptance 0.4 a third of those rows
were never used, and the greedy cost tables the controllers decide by do not see them.

`sample_rows_until_rejected` samples depth by depth: every request's row 0 (and every prefill chunk's
sampled row) first, then row j + 1 only for the requests whose drafts d_1..d_{j+1} all equal the samples
y_0..y_j. A random row is sampled once per committed token, as in plain decoding, plus once more when a
draft is rejected.

Why the tokens are unchanged: every committed token is read from a row that both ways sample. A seeded
request draws a row's noise from (seed, position) alone (seeding.py), so the row gives the same token
however rows are grouped into calls. An unseeded row draws fresh noise from the engine's generator,
independent of every other row's, in both ways; which rows are drawn at all depends only on rows already
sampled, so the committed tokens keep exactly the target's distribution (tests/unit/test_verify_rows.py
and the distribution tests).

Why the controllers need no sampling term in their greedy cost tables: a request's sampled rows are now
exactly its committed tokens (m accepted drafts + the deciding row), so random rows add the same cost s
per committed token to plain decoding and to every speculative candidate; tokens per ms, 1 / (C / n + s)
for a round of cost C committing n tokens, ranks the candidates as n / C does. (Before, a k-step round
paid s (1 + k) per request for 1 + m tokens, so the greedy tables made speculation at T > 0 look cheaper
than it was.)

The cost is one `sample` call per depth instead of one per round (mostly fixed cost: the sampling tensors,
the generators, the call; a one-row greedy call takes 0.08 ms on a Zen 2 core, its argmax 0.01 ms,
bench/results/s39/sampling_row.md and race_row.md), so the runner uses it only where rows are dear:
random rows whose draft tokens are on the host (CPU; on an accelerator the round keeps one batched call
and one read-back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from adaspec.sampling.sampler import SamplingTensors, sample
from adaspec.sampling.seeding import row_generators
from adaspec.sampling_params import SamplingParams

UNSAMPLED = -1  # a row after its request's first rejection: never read


@dataclass(frozen=True)
class RowGroup:
    """One chunk's sampled rows: `first` (index into the logits' rows), and the draft tokens its rows
    verify (row j verifies drafts[j]; a prefill chunk's or plain decode's single row verifies none)."""

    first: int
    drafts: Sequence[int] = ()


def row_groups(is_decode: Sequence[bool], n_sampled: Sequence[int], drafts: Sequence[Sequence[int]],
               lens: Sequence[int]) -> list[RowGroup]:
    """The groups of a round's sampled rows, chunk by chunk: a decoding request's 1 + L rows verify its
    first L draft tokens (`drafts`, `lens`: per decoding request); another chunk's sampled row (if any)
    verifies nothing."""
    groups, first, b = [], 0, 0
    for dec, n in zip(is_decode, n_sampled):
        if dec:
            groups.append(RowGroup(first, tuple(drafts[b][:lens[b]])))
            b += 1
        elif n:
            groups.append(RowGroup(first))
        first += n
    return groups


def sample_rows_until_rejected(
    logits: torch.Tensor,  # [R, V] the sampled rows, grouped as `groups` say
    groups: Sequence[RowGroup],
    params: Sequence[SamplingParams],  # per row
    positions: Sequence[int],  # per row: the absolute position it samples (seeded noise)
    default_generator: torch.Generator | None,
) -> list[int]:
    """[R] tokens per row, `UNSAMPLED` for the rows after a request's first rejection (module docstring)."""
    R = logits.shape[0]
    if len(params) != R or len(positions) != R:
        raise ValueError(f"one SamplingParams and one position per row: {R} rows, {len(params)} params, "
                         f"{len(positions)} positions")
    y = [UNSAMPLED] * R
    frontier = [(g, 0) for g in groups]  # (group, depth)
    while frontier:
        rows = [g.first + j for g, j in frontier]
        if rows == list(range(R)):
            sub = logits
        else:
            sub = logits.index_select(0, torch.tensor(rows, dtype=torch.long, device=logits.device))
        row_params = [params[r] for r in rows]
        tensors = SamplingTensors.from_params(row_params, logits.device)
        gens = row_generators([p.seed for p in row_params], [positions[r] for r in rows], logits.device)
        tokens = sample(sub, tensors, gens, default_generator=default_generator).tolist()
        deeper = []
        for (g, j), r, t in zip(frontier, rows, tokens):
            y[r] = t
            if j < len(g.drafts) and g.drafts[j] == t:
                deeper.append((g, j + 1))
        frontier = deeper
    return y


__all__ = ["RowGroup", "UNSAMPLED", "row_groups", "sample_rows_until_rejected"]
