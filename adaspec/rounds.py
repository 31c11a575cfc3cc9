"""Per-round plain data passed between the engine, the controllers and the runner.

A round: the scheduler picks chunks (`engine.scheduler.ScheduledBatch`), a plan says how much
speculation each decoding request gets (`RoundPlan`), the runner drafts, verifies, samples and
accepts, and hands back a `RoundResult` of Python lists (after the round's one host sync).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RoundPlan:
    num_steps: int  # draft tokens proposed per decoding request (MTP: k, DSpark: width w; 0 = none)
    # per decoding request, in batch order: draft tokens the target verifies (<= num_steps); with
    # an adaptive admission these are only upper bounds (what each request may still emit)
    verify_lens: tuple[int, ...]
    # "fixed": verify_lens as given, cut to what the draft proposed (DraftOutput.lengths: the Suffix
    # draft proposes nothing without a match) unless `exact`; "budget": the round's current path probabilities fill a
    # padded row budget decided in advance (R-D4); "sync": greedy admission with early stop (R-D3a)
    admission: str = "fixed"
    row_budget: int | None = None  # padded target rows G for "budget"
    round_id: int | None = None
    # a round the controller runs only to keep its acceptance estimate alive (issue 13: bounded,
    # counted exploration; metrics `<ns>:adaptive_probe_rounds_total`)
    probe: bool = False
    exact: bool = False  # "fixed" verifies exactly verify_lens, proposals or not (calibration measures shapes)
    # the weight of extra tokens in the admission (adaptive/closed_batch.py; 1 = all count): one for the batch, or in a
    # closed batch one per decoding request (batch order), by which "sync" weighs and "budget" ranks the candidates
    token_value: float | tuple[float, ...] = 1.0
    # indices (batch order) of the decoding requests that draft this round; None = all. The others
    # verify nothing (their verify_lens are 0) and keep their refresh entries pending: a probe of the
    # plain floor drafts for a few requests only (adaptive/floor.py, probe_requests)
    draft_only: tuple[int, ...] | None = None
    # "fixed", not `exact`: each request verifies its drafts only up to the first whose path probability is below this
    # (the draft step's confidence stop, adaptive/step_policy.py), and the draft may stop once every request is below
    # it; 0 = off
    stop_below: float = 0.0
    # a round the adaptive draft step runs to time k = 1 as served: plain inside a k = 1 stretch, or k = 1 (never at the
    # greedy ceiling) at k = 0 (its served pricing, adaptive/step_served.py; metrics
    # `<ns>:adaptive_cost_check_rounds_total`)
    cost_check: bool = False
    # the draft step ran this batch (one greedy request) at its ceiling k_max instead of the controller's k >= 1, the
    # confidence stop deciding the depth (adaptive/step_policy.py, `greedy_ceiling`)
    ceiling: bool = False

    @staticmethod
    def plain(num_decoding: int) -> "RoundPlan":
        return RoundPlan(0, (0,) * num_decoding)

    def check_shortened(self, out: "RoundPlan", has_verify_controller: bool) -> "RoundPlan":
        """`out` (a plan_transform's result for this plan) if it only shortens this plan; ValueError otherwise."""
        if (len(out.verify_lens) != len(self.verify_lens) or out.num_steps > self.num_steps
                or any(a > max(b, 0) for a, b in zip(out.verify_lens, self.verify_lens))
                or max(out.verify_lens, default=0) > out.num_steps):
            raise ValueError("plan_transform may only shorten a plan (verify lengths <= the plan's and <= its "
                             "draft steps, draft steps <= the plan's)")
        if out.admission == "budget" and out.row_budget is None:
            raise ValueError("plan_transform: a 'budget' plan needs row_budget")
        if out.draft_only is not None and (out.draft_only != self.draft_only or any(
                L for i, L in enumerate(out.verify_lens) if i not in set(out.draft_only))):
            raise ValueError("plan_transform may not change which requests draft (draft_only)")
        if out.admission != "fixed" and not has_verify_controller:
            raise ValueError(f"plan_transform: admission {out.admission!r} needs rounds.verify_controller")
        return out


@dataclass
class RoundResult:
    new_tokens: list[list[int]]  # per chunk of the batch: tokens to commit ([] for a non-final prefill chunk)
    verify_lens: list[int]  # per decoding request: L_b
    num_accepted: list[int]  # per decoding request: m_b (<= L_b)
    # per decoding request: scores of its num_steps drafts ([] for a request that did not draft: a round
    # without draft steps, or one a probe left out, RoundPlan.draft_only)
    draft_scores: list[list[float]] = field(default_factory=list)
