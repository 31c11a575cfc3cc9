"""Distillation losses over the draft's reduced vocabulary (pure functions).

The teacher's distribution at a position is kept as its top-k log-probabilities (full-vocabulary
softmax). Mapped into draft ids (N = "not in the draft vocabulary"), it gives:
- `soft_ce`: cross-entropy to the teacher's top-k renormalised over the draft vocabulary (the KL
  to the teacher up to a constant);
- `hard_ce`: cross-entropy to the teacher's greedy token (what a greedy target accepts);
- `total_variation`: 1/2 ||p_d - p_t||_1, with teacher mass outside the kept top-k or outside the
  draft vocabulary counted as unmatched (an upper bound of the exact value);
- `greedy_accepted`: the label of the confidence head, 1 when the draft's greedy token equals the
  teacher's greedy token. A greedy draft verified by a greedy target is accepted exactly then, so
  this is the exact acceptance event the head must predict; the analytic 1 - TV is the acceptance
  rate of a *sampled* draft under a *sampled* target and is not what the engine's greedy drafts see
  (R-B4, R-D2).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def teacher_targets(topk_ids: torch.Tensor, topk_lp: torch.Tensor, t2d: torch.Tensor):
    """(draft ids [.., k] with N for ids outside the draft vocabulary, probs [.., k] float32,
    greedy label [..] as a draft id or N)."""
    d_ids = t2d[topk_ids]
    return d_ids, topk_lp.float().exp(), d_ids[..., 0]


def soft_ce(logq: torch.Tensor, d_ids: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """logq [R, N] log-softmax; d_ids/p [R, k] -> [R]."""
    N = logq.shape[-1]
    inside = d_ids < N
    p_in = p * inside
    gathered = logq.gather(-1, d_ids.clamp(max=N - 1))
    return -(p_in * gathered).sum(-1) / p_in.sum(-1).clamp_min(1e-6)


def hard_ce(logq: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """[R]; 0 where the teacher's greedy token is outside the draft vocabulary (label == N)."""
    N = logq.shape[-1]
    return F.nll_loss(logq, label.clamp(max=N - 1), reduction="none") * (label < N)


def total_variation(q: torch.Tensor, d_ids: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """q [R, N] draft probabilities; -> [R] in [0, 1]."""
    N = q.shape[-1]
    inside = d_ids < N
    q_k = q.gather(-1, d_ids.clamp(max=N - 1)) * inside
    p_in = p * inside
    l1 = (q_k - p_in).abs().sum(-1) + (1 - q_k.sum(-1)) + (1 - p_in.sum(-1))
    return (0.5 * l1).clamp(0, 1)


def greedy_accepted(logits: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """[R] float: 1 where argmax of the draft logits equals the teacher's greedy token."""
    return ((logits.argmax(-1) == label) & (label < logits.shape[-1])).float()


def position_weights(k: int, gamma: float, device=None) -> torch.Tensor:
    """exp(-(i-1)/gamma) for positions i = 1..k."""
    return torch.exp(-torch.arange(k, dtype=torch.float32, device=device) / gamma)


def mtp_loss(logits: torch.Tensor, d_ids, p, label) -> tuple[torch.Tensor, dict]:
    """Per-row CE to the greedy token + KL (soft CE) to the teacher's top-k. logits [R, N] -> [R]."""
    logq = torch.log_softmax(logits, dim=-1)
    ce, kl = hard_ce(logq, label), soft_ce(logq, d_ids, p)
    with torch.no_grad():
        acc = greedy_accepted(logits, label)
    return ce + kl, {"ce": ce.detach(), "kl": kl.detach(), "acc": acc}


def dspark_loss(logits: torch.Tensor, conf_logit: torch.Tensor, d_ids, p, label) -> tuple[torch.Tensor, dict]:
    """Per-row 0.1 CE + 0.9 TV + 1.0 BCE(confidence, greedy acceptance). logits [R, N], conf [R] -> [R]."""
    logq = torch.log_softmax(logits, dim=-1)
    ce = hard_ce(logq, label)
    tv = total_variation(logq.exp(), d_ids, p)
    with torch.no_grad():
        accepted = greedy_accepted(logits, label)
    bce = F.binary_cross_entropy_with_logits(conf_logit, accepted, reduction="none")
    return 0.1 * ce + 0.9 * tv + bce, {"ce": ce.detach(), "tv": tv.detach(), "bce": bce.detach(), "acc": accepted}


def weighted_mean(per_row: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (per_row * weights).sum() / weights.sum().clamp_min(1e-6)


def cosine_lr(peak: float, progress: float, step: int, warmup: int, floor: float = 0.1) -> float:
    """Linear warm-up over `warmup` steps, then cosine from `peak` to `floor * peak` by progress 1."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(max(progress, 0.0), 1.0)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))
