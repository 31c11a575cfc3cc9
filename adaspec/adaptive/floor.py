"""The plain-decode floor of adaptive target verify (issue 13; adaspec's extension of R-D).

R-D1 has the draft produce its full width every round and the budget decide what the target
verifies. When the budget admits no candidate (G = B: one row per request), that draft is pure
waste: nothing it proposed is verified. adaspec then skips the draft and runs a plain round,
which is lossless (no drafted token can be verified, so the round's tokens are the target's own)
and costs what a plain round costs. The drafter's context refresh is deferred to its next call
(round_runner.py), as in k = 0 rounds of the adaptive draft step.

Which rounds skip is decided before the round, from lagged feedback only:
- async (R-D4): the lag-2 budget G is known before the draft runs; G = B means no candidate;
- sync (R-D3a): admission needs the current round's scores, so the draft must run to admit
  anything. The gate predicts from the newest lagged rounds what the early-stopping admission
  will do (`sync_gain_from_lagged`: the early stop walked over the expected sorted path
  probabilities, the same cost table): if it stops before the first candidate, or where a plain
  round is predicted at least as fast, the round is predicted to lose and skips the draft.
  (Until 12-04 the gate used the async estimator, which searches past the cliffs of the cost
  curve that the early stop cannot cross: on prose at B = 4, 4% of the rounds drafted and then
  admitted nothing.) Rounds that draft are admitted exactly as before (the draft is then paid
  for, so the early stop compares with the drafted G = B cost).
  A second opinion can only add drafting rounds (stop 60): when the newest round predicts a loss, the
  round still drafts if the newest rounds holding `verify_controller.GATE_REQUESTS` request-rounds,
  each admitted by its own early stop, yield more tokens per ms together than plain rounds. With the
  newest round alone, one unconfident round kept a stream plain until the next probe: DSpark prose at
  one request drafted in 17% of its rounds and ran 0.86x its fixed L3. Both read the draft's
  confidences as corrected by the stream (draft_calibration.py), and so does the admission. Gate,
  window and admission price a drafted round of G rows as served once the engine has timed a few
  (verify_served.py, stop 61): the table overpriced 3-5-row rounds by 3-10% at one request. A third
  opinion, also only adding drafting rounds, reads no model at all: while the newest drafted rounds
  committed more tokens per ms as served than plain rounds, the round drafts (`realised_gain`).

Every table cell G >= B is a round *with* the full draft. The calibration therefore also measures
one plain round per request bucket (`CostTable.plain_cost_ms`, metadata `plain_ms`), and the
budget estimator counts "do not draft" as one more candidate, B / plain_ms: the floor skips the
draft whenever a plain round is predicted at least as fast as every budget, not only when no row
is admitted. Tables written before this have no plain costs: the plain round is then charged the
drafted G = B cost, a conservative floor (the log says so).

A skipped round yields no scores, so the lagged estimate would freeze at "do not speculate".
Exploration is bounded and counted: after `probe_interval` consecutive skipped rounds the next
round drafts anyway (a *probe*: full width for the requests it drafts for, below; sync admits
them by the normal rule, async at the cheapest budget, G = B; its scores feed the estimate). A probe that does not change the verdict doubles the interval, up to
`max_probe_interval` (the draft keeps losing, so asking again costs more than it can find); a
round predicted to gain resets it, and so does a batch none of whose requests was in the last drafting
round: the backoff was learnt on requests that have left (stop 39: at B = 1 on the mixed stream one
request's backoff outlasted the next request, and DSpark async verify drafted in 3% of the rounds; with
the reset 24%, 1.00x -> 1.18x plain, BENCHMARKS.md). The probe share is therefore at most 1 / (probe_interval + 1)
of the rounds, and falls towards 1 / (max_probe_interval + 1) in a long losing stretch;
`describe()` is the line the start-up log prints, and the counters go to the metrics.

A probe drafts for a few requests only (`probe_requests`: a quarter of the batch, at least one), the
ones with the fewest pending refresh entries. What a probe costs is mostly the drafter catching up
on the context it skipped (every deferred entry of every request it drafts for) plus its block;
what it is for is a fresh sample of path probabilities, and the budget estimator already scales a
lagged round of B_r requests to the current B (verify_budget.py). The other requests verify
nothing that round and keep their entries pending, which a request that never drafts again
never pays. A probe that finds a gain is followed by a drafting round of the whole batch, whose
scores replace the probe's. Measured at B = 16 on the mixed stream, a full probe after a long
skipped stretch cost about 1.4 plain rounds.
"""

from __future__ import annotations

from dataclasses import dataclass

# Drafters whose proposals appear the moment the text starts repeating (the model-free Suffix draft,
# alone or in the MTP+Suffix hybrid): lagged scores cannot foresee a new match, and their draft costs
# next to nothing on the host, so adaptive verify never skips their draft.
NEVER_SKIPPED = ("suffix", "mtp+suffix")


def floor_applies(drafter) -> bool:
    """Whether adaptive verify may skip this drafter's draft (see NEVER_SKIPPED)."""
    return getattr(drafter, "kind", None) not in NEVER_SKIPPED


def probe_requests(B: int) -> int:
    """How many of a batch's B decoding requests a probe round drafts for (module docstring)."""
    return max(1, -(-B // 4))


DEFAULT_PROBE_INTERVAL = 50
DEFAULT_MAX_PROBE_INTERVAL = 800


@dataclass
class PlainFloor:
    probe_interval: int = DEFAULT_PROBE_INTERVAL  # skipped rounds before a probe (0 = never probe)
    max_probe_interval: int = DEFAULT_MAX_PROBE_INTERVAL  # the interval doubles up to this while probes find nothing
    rounds: int = 0  # decoding rounds planned under the floor
    skipped: int = 0  # rounds that skipped the draft (planned as plain rounds)
    probes: int = 0  # rounds that drafted only to refresh the estimate
    _streak: int = 0  # consecutive skipped rounds since the last drafting round
    _interval: int = 0  # the current probe interval (probe_interval, doubled while probes find nothing)
    _probed: bool = False  # the last drafting round was a probe
    _seen: frozenset = frozenset()  # the requests of the last drafting round (probe or predicted gain)

    def __post_init__(self):
        if self.probe_interval < 0:
            raise ValueError(f"probe_interval must be >= 0 (0 = never probe), got {self.probe_interval}")
        if self.max_probe_interval < self.probe_interval:
            raise ValueError(f"max_probe_interval ({self.max_probe_interval}) must be >= probe_interval "
                             f"({self.probe_interval})")
        self._interval = self.probe_interval

    def decide(self, predicted_gain: bool, can_verify: bool = True, requests=None) -> str:
        """'draft', 'skip' or 'probe' for the round about to be planned. `can_verify` False (no request
        may verify a draft token this round): a probe due waits for a round whose draft can be measured.
        `requests` (ids of the batch's decoding requests): when none of them was in the last drafting round,
        the backoff is forgotten (what the probes found was about requests that have left)."""
        self.rounds += 1
        batch = frozenset(requests) if requests is not None else None
        if batch is not None and self._seen and not (batch & self._seen):
            self._interval, self._probed = self.probe_interval, False
        if predicted_gain:
            self._streak, self._probed, self._interval = 0, False, self.probe_interval
            self._seen = batch or self._seen
            return "draft"
        if self._probed:  # the probe did not change the verdict: ask less often
            self._probed = False
            self._interval = min(self.max_probe_interval, 2 * self._interval)
        if self.probe_interval and self._streak >= self._interval and can_verify:
            self._streak, self._probed = 0, True
            self.probes += 1
            self._seen = batch or self._seen
            return "probe"
        self._streak += 1
        self.skipped += 1
        return "skip"

    def describe(self) -> str:
        if not self.probe_interval:
            return ("[adaspec] plain floor: rounds predicted (from lagged feedback) to gain nothing from a draft "
                    "skip it (plain rounds); no probes (probe_interval 0)")
        share = 100.0 / (self.probe_interval + 1)
        return (f"[adaspec] plain floor: rounds predicted (from lagged feedback) to gain nothing from a draft "
                f"skip it (plain rounds); one probe round drafts after {self.probe_interval} skipped rounds to "
                f"refresh the estimate, the interval doubling up to {self.max_probe_interval} while probes find "
                f"nothing and back to {self.probe_interval} when every request of the last drafting round has "
                f"left (probe rate <= {share:.1f}% of rounds)")

    def summary(self) -> dict:
        return {"rounds": self.rounds, "skipped_draft": self.skipped, "probes": self.probes,
                "probe_share": self.probes / self.rounds if self.rounds else 0.0}
