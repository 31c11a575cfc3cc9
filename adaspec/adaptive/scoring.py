"""Acceptance predictors and path probabilities (R-D2).

- score s_{b,j}: a per-position *conditional* acceptance predictor for request b's draft j
  (DSpark: the confidence head; MTP: the draft probability of the selected token,
  exp(selected_logit - logsumexp(draft_logits)), a predictor, not the true acceptance rate).
- path probability P_{b,j} = prod_{i <= j} s_{b,i}: the predicted probability that drafts 1..j
  are all accepted. With scores in [0, 1] P is non-increasing in j, exactly in floating point too
  (p * s <= p for s <= 1, and rounding is monotone), which is what makes rank-by-P admit prefixes.

Pure tensor functions, no host sync: they run between draft and target on the device; on the CPU, where the
scores are host memory, the confidence stop's lengths come from `HostPathStop` (numpy, the same float32 products).
"""

from __future__ import annotations

import numpy as np
import torch


def mtp_scores(selected_logits: torch.Tensor, logsumexp: torch.Tensor) -> torch.Tensor:
    """exp(selected_logit - logsumexp(draft_logits)), elementwise on [B, k] (float32 result)."""
    return torch.exp(selected_logits.float() - logsumexp.float())


def mtp_scores_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Scores of the selected `tokens` [B, k] from the draft's `logits` [B, k, V]."""
    logits = logits.float()
    selected = logits.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    return mtp_scores(selected, torch.logsumexp(logits, dim=-1))


def path_probabilities(scores):
    """Cumulative product along positions (last axis): [B, w] -> [B, w].

    NaN scores count as 0 and scores are clamped to [0, 1], so the result is always a valid,
    non-increasing survival curve. Accepts a torch tensor (stays on its device) or a numpy array.
    """
    if isinstance(scores, torch.Tensor):
        return torch.cumprod(torch.nan_to_num(scores.float(), nan=0.0).clamp(0.0, 1.0), dim=-1)
    return np.cumprod(unit_interval(scores), axis=-1)


def unit_interval(values) -> np.ndarray:
    """float64 copy of `values` with NaN -> 0, clamped to [0, 1] (nan_to_num, ~25 us, only where a value is not
    finite: the host's scores and path probabilities are read every round)."""
    a = np.asarray(values, dtype=np.float64)
    return np.clip(a if np.isfinite(a).all() else np.nan_to_num(a, nan=0.0), 0.0, 1.0)


def confident_lengths(scores: torch.Tensor, stop_below: float) -> list[int]:
    """Per request (row of `scores` [B, k]), the draft steps up to and including the first whose path probability
    is below `stop_below` (k when none is): what a round with the draft step's confidence stop verifies
    (adaptive/step_policy.py, `confidence_stop`). The step that crosses is verified: its score is only known
    once it has been drafted, and the draft was paid for; so with one step there is nothing to cut. On an
    accelerator one host read of B numbers; on the CPU the same float32 products over the host's copy (a dozen
    tensor ops were ~0.5% of a batch-1 round)."""
    B, k = scores.shape[0], scores.shape[-1]
    if k <= 1:
        return [k] * B
    if scores.device.type == "cpu":
        stop, s = HostPathStop(B, k, stop_below), scores.detach().float().numpy()
        for j in range(k - 1):  # a first crossing at step k leaves k, as no crossing does
            if stop.step(s[:, j], j):
                break
        return stop.lengths
    below = path_probabilities(scores) < stop_below
    first = torch.where(below.any(dim=-1), below.int().argmax(dim=-1) + 1, torch.full_like(below[:, 0], k, dtype=torch.long))
    return first.tolist()


class HostPathStop:
    """The confidence stop's path probabilities on the host, one draft step at a time: float32 products of the scores
    clipped to [0, 1] (NaN = 0), as path_probabilities computes them. `lengths[b]`: the first step whose path fell
    below `stop_below`, that step included (num_steps while none has). confident_lengths runs it over a finished
    draft's scores; the MTP draft runs it as it drafts, to end the draft once every request has fallen below
    (drafts/mtp.py), and hands the lengths on (DraftOutput.confident)."""

    def __init__(self, batch_size: int, num_steps: int, stop_below: float):
        self.path = np.ones(batch_size, dtype=np.float32)
        self.threshold = np.float32(stop_below)
        self.lengths = [num_steps] * batch_size
        self.open = list(range(batch_size))  # requests still at or above the threshold

    def step(self, scores: np.ndarray, j: int) -> bool:
        """Multiply in step j's scores [B] (float32); True once every request has fallen below."""
        self.path *= np.clip(np.nan_to_num(scores, nan=0.0), 0.0, 1.0)
        below = self.path < self.threshold
        still = []
        for b in self.open:
            if below[b]:
                self.lengths[b] = j + 1
            else:
                still.append(b)
        self.open = still
        return not still
