"""Acceptance predictors and path probabilities (R-D2)."""

from __future__ import annotations

import numpy as np
import torch

from adaspec.adaptive.scoring import confident_lengths, mtp_scores, mtp_scores_from_logits, path_probabilities


def test_mtp_scores_are_selected_token_probabilities():
    """R-D2: exp(selected_logit - logsumexp(draft_logits)) on [B, k]."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 11, generator=g)
    tokens = logits.argmax(-1)
    selected = logits.gather(-1, tokens[..., None]).squeeze(-1)
    s = mtp_scores(selected, torch.logsumexp(logits, -1))
    expected = torch.softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
    assert s.shape == (3, 4)
    torch.testing.assert_close(s, expected)
    torch.testing.assert_close(mtp_scores_from_logits(logits, tokens), expected)


def test_path_probabilities_are_cumulative_products():
    """R-D2: path probability of position j = product of the scores up to j."""
    s = torch.tensor([[0.9, 0.5, 1.0], [0.2, 0.0, 0.7]])
    P = path_probabilities(s)
    torch.testing.assert_close(P, torch.tensor([[0.9, 0.45, 0.45], [0.2, 0.0, 0.0]]))
    assert bool((P[:, 1:] <= P[:, :-1]).all())
    np.testing.assert_allclose(path_probabilities(s.numpy()), P.numpy(), rtol=1e-6)


def test_path_probabilities_clean_bad_scores():
    s = torch.tensor([[float("nan"), 0.5], [1.5, -0.1]])
    torch.testing.assert_close(path_probabilities(s), torch.tensor([[0.0, 0.0], [1.0, 0.0]]))


def test_path_probabilities_never_increase_in_float():
    g = torch.Generator().manual_seed(1)
    s = torch.rand(64, 7, generator=g) ** 0.05  # scores close to 1
    P = path_probabilities(s)
    assert bool((P[:, 1:] <= P[:, :-1]).all())


def test_confident_lengths_verify_up_to_the_step_that_crosses():
    """The draft step's confidence stop (policy.confidence_stop): a request verifies its drafts up to and including
    the first whose path probability is below the threshold; all of them when none is; filler (score 0) after a
    stopped draft never lengthens a request that had already crossed."""
    scores = torch.tensor([[0.9, 0.9, 0.9],   # path 0.9, 0.81, 0.729: never below 0.6
                           [0.5, 0.9, 0.9],   # below at step 1
                           [0.9, 0.3, 0.9],   # path 0.9, 0.27: below at step 2
                           [0.7, 0.8, 0.0]])  # path 0.7, 0.56: below at step 2 (then filler)
    assert confident_lengths(scores, 0.6) == [3, 1, 2, 2]
    assert confident_lengths(scores, 0.2) == [3, 3, 3, 3]  # 0.9 * 0.3 * 0.9 = 0.243; filler 0 crosses at 3
    assert confident_lengths(scores[:, :1], 0.95) == [1, 1, 1, 1]


def test_confident_lengths_on_the_host_equal_the_tensor_rule():
    """On the CPU confident_lengths reads the scores through numpy (stop 46); the lengths must be the tensor rule's
    (float32 path products, NaN as 0, clamped to [0, 1]), also for products that land next to the threshold."""
    g = torch.Generator().manual_seed(3)
    for k in (1, 2, 3, 5):
        s = torch.rand(256, k, generator=g) ** 0.3
        s[::17, 0] = float("nan")
        s[::13, -1] = 1.5
        s[::11] = torch.tensor([0.6 ** (1 / k)] * k)  # products within rounding of the threshold
        for tau in (0.2, 0.6, 0.9):
            below = path_probabilities(s) < tau
            want = [int(r.int().argmax()) + 1 if bool(r.any()) else k for r in below]
            want = [1] * len(want) if k == 1 else want  # the crossing step is verified: one step is never cut
            assert confident_lengths(s, tau) == want
    # a draft running in half precision hands over half-precision scores (numpy has no bfloat16)
    for dtype in (torch.bfloat16, torch.float16):
        s = (torch.rand(64, 3, generator=g) ** 0.3).to(dtype)
        below = path_probabilities(s) < 0.6
        assert confident_lengths(s, 0.6) == [int(r.int().argmax()) + 1 if bool(r.any()) else 3 for r in below]
