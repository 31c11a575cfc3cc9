"""The start-up lines that describe adaptive control's controllers (R-F7's effective configuration, continued):
how the draft step explores, prices and stops, and how adaptive verify's plain floor, gate, closed-batch weight
and served prices behave. Split from engine/control.py, whose `AdaptiveControl.reset(log=True)` logs them once.
"""

from __future__ import annotations

from ..adaptive.verify_controller import GATE_REQUESTS


def step_lines(ctl) -> list[str]:
    """The draft step's lines: exploration, served pricing, and for MTP with the confidence stop its depth rule and
    the greedy ceiling."""
    step = ctl.step
    lines = [step.describe_exploration(),
             step.describe_served(None if ctl._timed_rounds else f"{ctl.algorithm}: its rounds verify only what matched")]
    if ctl.algorithm == "MTP" and step.policy.confidence_stop > 0:
        lines.append(step.describe_depth())
        lines.append("[adaspec] greedy ceiling: " + (
            f"a batch of one greedy request that speculates drafts up to k_max = {ctl.width} and the confidence stop "
            "decides each round's depth (policy.greedy_ceiling)" if step.policy.greedy_ceiling
            else "off (policy.greedy_ceiling); the controller's k is the ceiling"))
    return lines


def verify_lines(ctl) -> list[str]:
    """Adaptive verify's lines: the plain floor (or why it is off), the closed batch's token weights, the sync gate,
    served pricing, and a warning for a table without plain-round costs."""
    lines = []
    if ctl.floor is None:
        lines.append(f"[adaspec] plain floor: off for {ctl.algorithm} (its proposals appear as soon as the text "
                     "repeats, which lagged feedback cannot foresee; its draft is nearly free)")
    if ctl.table.metadata.plain_ms:
        values = ", ".join(f"{b}: {ctl.token_value_closed(b):.2f}" for b in ctl.geometry.request_buckets)
        lines.append("[adaspec] closed batch: while no request waits for a slot, an extra token is worth what it "
                     "saves, c(B) - c(B-1) of a plain round, against c(B) / B for a decoded one; the admission "
                     "spreads that over the requests by what each one's earlier exit saves, expected over when it "
                     f"will leave (adaptive/closed_batch.py); its weight at B = {values}")
    if ctl.floor is not None:
        lines.append(ctl.floor.describe())
        if ctl.verify.mode == "sync":
            lines.append("[adaspec] sync gate: a round the newest lagged round predicts to lose still drafts when the "
                         f"newest rounds holding {GATE_REQUESTS} request-rounds, each admitted by its own early stop, "
                         "predict a gain together; gate and admission read the draft's confidences times the "
                         "stream's accepted / predicted drafts (adaptive/draft_calibration.py)")
        if ctl.verify.served is not None:
            lines.append(ctl.verify.served.describe())
        if not ctl.table.metadata.plain_ms:
            lines.append("[adaspec] plain floor: this cost table has no plain-round costs (written before issue 13): "
                         "a plain round is charged the drafted G = B cost, so the floor skips the draft less often "
                         "than it should; recalibrate to measure them")
    return lines
