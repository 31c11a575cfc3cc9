"""Adaptive speculation controllers: pure, unit-tested policy (no engine or runner imports).

- feedback: windowed prefix acceptance from completed rounds, lag made explicit (R-C2, R-C4)
- scoring: MTP acceptance predictor and path probabilities (R-D2)
- step_controller: one MTP step count per batch, k = 0 included (R-C1, R-C2); step_costs: the cost
  table a batch is priced at; step_explore: how it explores at k = 0; closed_step: its score when no
  request waits for a slot
- verify_controller: per-request verify lengths, sync (early stop) and async (lagged budget)
  modes, unified-layout buckets (R-D1, R-D3, R-D4, R-F6)
"""

from .feedback import AcceptanceWindow, LaggedFeedback
from .scoring import mtp_scores, mtp_scores_from_logits, path_probabilities
from .step_controller import DraftStepController, StepDecision, StepPolicy, best_step, step_throughput
from .verify_budget import (
    AdmissionDecision,
    BudgetDecision,
    allocate_in_budget,
    budget_from_lagged,
    expected_top_sums,
    rank_order,
    sync_admission,
    unified_buckets,
)
from .verify_controller import VerifyController, VerifyDecision

__all__ = [
    "AcceptanceWindow", "LaggedFeedback",
    "mtp_scores", "mtp_scores_from_logits", "path_probabilities",
    "DraftStepController", "StepDecision", "StepPolicy", "best_step", "step_throughput",
    "AdmissionDecision", "BudgetDecision", "VerifyController", "VerifyDecision", "allocate_in_budget",
    "budget_from_lagged", "expected_top_sums", "rank_order", "sync_admission", "unified_buckets",
]
