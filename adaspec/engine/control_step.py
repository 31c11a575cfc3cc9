"""The draft step's rounds inside adaptive control (R-C1, R-C2, R-C4): what `AdaptiveControl` plans and observes
when `--enable_adaptive_draft_step` is on. Split from engine/control.py, which holds the start-up, the verify side
and the per-round entry points; `StepRounds` is its base class and reads its attributes (`step`, `algorithm`,
`width`, `engine`, `ceiling_batches`, `_timed_rounds`, `_probe_subset`).
"""

from __future__ import annotations

import functools

from ..adaptive.step_served import served_kind
from ..rounds import RoundPlan


class StepRounds:
    def _plan_step(self, decoding, caps: tuple[int, ...], round_id: int, B: int, kv_len: int) -> RoundPlan:
        """The draft step's plan for a batch of B decoding requests: the controller's k, raised to k_max at the
        greedy ceiling, or a k = 0 probe for a subset of the batch."""
        k = self.step.plan(B, round_id=round_id, kv_len=kv_len, can_verify=any(caps),
                           requests=[r.request_id for r in decoding],
                           closed=functools.partial(self._closed_batch, decoding))  # computed if a score reads it
        # the confidence stop reads the MTP draft's probability of its own tokens (step_policy.py); the Suffix
        # drafts' scores are online acceptance estimates of free proposals, for which it was never measured
        stop = self.step.policy.confidence_stop if self.algorithm == "MTP" else 0.0
        # a cost check at k = 0 times plain k = 1 rounds (adaptive/step_served.py): never at the ceiling
        ceiling = k > 0 and not self.step.last_check and self._greedy_ceiling(decoding, stop)
        if ceiling:  # one greedy request: draft to k_max, the stop decides how deep (step_policy.greedy_ceiling)
            k = self.width
            self.ceiling_batches += 1
        caps = tuple(min(k, c) for c in caps)
        if not self.step.last_probe:
            return RoundPlan(k, caps, round_id=round_id, stop_below=stop, cost_check=self.step.last_check,
                             ceiling=ceiling)
        # a k = 0 probe drafts for a quarter of the batch, as the plain floor's do (floor.py): after a
        # long stretch at k = 0 the drafter would otherwise catch up on every request's skipped context
        subset, caps = self._probe_subset(decoding, caps)
        return RoundPlan(k, caps, round_id=round_id, probe=True, draft_only=subset, stop_below=stop,
                         ceiling=ceiling)

    def _greedy_ceiling(self, decoding, stop: float) -> bool:
        """Whether a speculating batch runs at the ceiling k_max (policy.greedy_ceiling): a drafter decides each
        request's depth itself (the MTP draft with the confidence stop on; MTP+Suffix, whose value rule picks each
        request's source and MTP depth, drafts/hybrid.py) and the batch is one greedy request.

        MTP+Suffix (stop 59): its rounds verify a Suffix match at no draft cost, or an MTP draft at the depth of best
        value, so the table's k (calibrated on synthetic requests, which never match) prices neither, and the window's
        acceptance mixes both sources. On the held-out mixed stream at one request the draft step kept k = 1 in 91%
        of batches and ran 1.389x plain where a fixed k = 5 ran 1.655x (0.836x; `BENCHMARKS.md`, stop 59)."""
        own_depth = stop > 0 or self.algorithm == "MTP+Suffix"
        return (own_depth and self.step.policy.greedy_ceiling and len(decoding) == 1
                and decoding[0].params.temperature == 0)

    # a request's acceptance relative to its batch's is shrunk towards 1 by this many draft tokens at the batch's rate
    CLOSED_SHRINK_TOKENS = 16

    def _closed_batch(self, decoding) -> list[tuple[int, float]] | None:
        """The draft step's closed-batch view (adaptive/closed_step.py): None while a request waits for a slot
        (or the policy's closed_batch is off); else per decoding request (tokens it may still generate, its accepted draft
        tokens per verified one over the batch's, shrunk towards 1 by CLOSED_SHRINK_TOKENS)."""
        if not self.step.policy.closed_batch or self.engine.scheduler.waiting or len(decoding) < 2:
            return None
        drafted = sum(r.num_draft_tokens for r in decoding)
        mean = sum(r.num_accepted_tokens for r in decoding) / drafted if drafted else 0.0
        s = self.CLOSED_SHRINK_TOKENS
        out = []
        for r in decoding:
            rho = (r.num_accepted_tokens + s * mean) / (r.num_draft_tokens + s) / mean if mean > 0 else 1.0
            out.append((max(0, r.params.max_tokens - len(r.output_token_ids)), rho))
        return out

    def _observe_step(self, result, round_id: int, plan: RoundPlan | None, seconds: float | None,
                      decode_only: bool) -> None:
        """A completed round for the draft step: its acceptance, and with its plan and time a served price of k."""
        # with the confidence stop, the most each request could verify (its cap): a draft that ended short of it
        # stopped (adaptive/step_depth.py)
        stopped = (plan is not None and plan.stop_below > 0 and plan.admission == "fixed" and not plan.exact
                   and len(plan.verify_lens) == len(result.verify_lens))
        self.step.observe(result.verify_lens, result.num_accepted, round_id=round_id,
                          ceilings=plan.verify_lens if stopped else None)  # kept only with ceiling pricing
        if plan is not None and seconds is not None and round_id is not None and self._timed_rounds:
            # pure: decode only, no probe subset, every request drafted and verified the round's k; with ceiling
            # pricing, or at the greedy ceiling (whose rounds are never planned k = 1 ones), a round the confidence
            # stop ended at one step d for every request is served at k = d
            stop = plan.stop_below if self.step.policy.ceiling_pricing or plan.ceiling else 0.0
            k, pure = served_kind(plan.num_steps, plan.verify_lens, result.verify_lens, stop, decode_only,
                                  plan.probe, plan.draft_only is not None)
            self.step.observe_round(round_id, len(result.verify_lens), k, 1000.0 * seconds, pure)
