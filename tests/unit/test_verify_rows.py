"""Verify rows sampled only as deep as the acceptance (sampling/verify_rows.py; R-B3, R-B5)."""

from __future__ import annotations

import pytest
import torch

from adaspec.sampling.sampler import SamplingTensors, sample
from adaspec.sampling.seeding import row_generators
from adaspec.sampling.verify_rows import UNSAMPLED, RowGroup, row_groups, sample_rows_until_rejected
from adaspec.sampling_params import SamplingParams

V = 50


def test_row_groups_follow_the_chunks():
    # a prefill chunk that samples, one that does not, two decoding requests verifying 2 and 0 drafts
    groups = row_groups([False, False, True, True], [1, 0, 3, 1], [[7, 8, 9], [4, 5, 6]], [2, 0])
    assert groups == [RowGroup(0), RowGroup(1, (7, 8)), RowGroup(4, ())]


def _full(logits, params, positions):
    gens = row_generators([p.seed for p in params], positions, "cpu")
    return sample(logits, SamplingTensors.from_params(params), gens).tolist()


@pytest.mark.parametrize("temperature", [0.0, 1.3])
def test_sampled_rows_equal_the_batched_call_and_stop_at_the_first_rejection(temperature):
    """Seeded rows give the tokens one batched `sample` call gives (noise from (seed, position) only);
    a request's rows after its first mismatch are not sampled; greedy rows follow the same walk."""
    g = torch.Generator().manual_seed(0)
    L = 4
    B = 6
    logits = torch.randn(B * (L + 1), V, generator=g) * 3
    params = [SamplingParams(temperature=temperature, seed=100 + b) for b in range(B) for _ in range(L + 1)]
    positions = [10 + j for b in range(B) for j in range(L + 1)]
    full = _full(logits, params, positions)
    # request b's drafts agree with the full samples for its first b tokens (b = 5: all 4), then differ
    groups = []
    for b in range(B):
        y = full[b * (L + 1): b * (L + 1) + L]
        m = min(b, L)
        drafts = y[:m] + [(t + 1) % V for t in y[m:]]
        groups.append(RowGroup(b * (L + 1), tuple(drafts)))
    got = sample_rows_until_rejected(logits, groups, params, positions, None)
    for b in range(B):
        m = min(b, L)
        rows = got[b * (L + 1): (b + 1) * (L + 1)]
        assert rows[:m + 1] == full[b * (L + 1): b * (L + 1) + m + 1]  # accepted rows + the deciding one
        assert all(t == UNSAMPLED for t in rows[m + 1:])  # nothing after the first rejection


def test_unseeded_rows_use_the_default_generator_and_a_mixed_batch_keeps_greedy_rows():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, V, generator=g)
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=1.0), SamplingParams(temperature=1.0, seed=5)]
    groups = [RowGroup(0), RowGroup(1), RowGroup(2)]
    a = sample_rows_until_rejected(logits, groups, params, [3, 3, 3], torch.Generator().manual_seed(9))
    b = sample_rows_until_rejected(logits, groups, params, [3, 3, 3], torch.Generator().manual_seed(9))
    assert a == b  # the default generator drives the unseeded row
    assert a[0] == int(logits[0].argmax())
    assert a[2] == _full(logits[2:], params[2:], [3])[0]


def test_row_count_mismatch_is_refused():
    with pytest.raises(ValueError, match="one SamplingParams and one position per row"):
        sample_rows_until_rejected(torch.zeros(2, V), [RowGroup(0)], [SamplingParams()], [0, 0], None)
