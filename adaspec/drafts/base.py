"""The Drafter protocol: what the engine asks of every draft (MTP, DSpark, ...).

Vocabulary (positions are absolute token positions of one request):
- `h_p`: the target's hidden features at position p (what the target computed when it read token
  t_p; it predicts t_{p+1}). MTP uses the last layer's pre-norm hidden state; DSpark may ask for
  several layers (`capture_layers`), concatenated along the feature axis.
- a **refresh entry** `(p, h_p, t_{p+1})`: produced for every position the target has verified and
  committed, once t_{p+1} is known (the next prompt token, an accepted draft token, or the
  replacement/bonus token). Entries arrive in order, without gaps, starting at p = 0.
- **newest token** `t_n`: the last committed token (not yet in the target's KV cache). The last
  refresh entry of a request is always `(n-1, h_{n-1}, t_n)`.

One `draft()` call per round does both verbs of the round's draft phase in one pass:
1. refresh: write the draft's own context (its KV cache) from the new entries, with *target*
   features, overwriting anything an earlier proposal wrote there with draft features;
2. propose: draft `num_steps` tokens after t_n, greedily (the draft is always deterministic,
   R-B4), with one score per token: MTP the draft probability of the selected token
   `exp(logit - logsumexp(logits))`, DSpark the confidence head's conditional acceptance
   probability (R-D2).
`num_steps = 0` refreshes only (the context must stay fresh across rounds that draft nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class DraftBatch:
    """One round's draft input for B requests; tensors on the engine's device."""

    slots: list[int]  # [B] cache slot of each request (same slot ids as the target)
    entry_starts: list[int]  # [B] position p of each request's first new refresh entry
    entry_lens: list[int]  # [B] number of new refresh entries (>= 1)
    hidden: torch.Tensor  # [R, F] target features h_p of all entries, requests concatenated in order
    next_tokens: torch.Tensor  # [R] int64, t_{p+1} of each entry
    num_steps: int  # tokens to propose per request (0 = refresh only)
    # Only for drafters that declare `reads_tokens = True` (the model-free Suffix draft, issue 10):
    # per request, the committed tokens t_p..t_{p+len} on the host (p = entry_starts[b], len =
    # entry_lens[b]; t_p is the token the target read at the first new entry's position, for p = 0
    # the prompt's first token), so the draft reads tokens without a device-to-host copy.
    tokens_host: list[list[int]] | None = None
    round_id: int | None = None  # the engine's round id (None in calibration); drafters with feedback use it
    # a sequential drafter may stop proposing once every request's path probability (the product of its scores so
    # far) is below this: the rest of each row is then filler with score 0 (RoundPlan.stop_below); 0 = never
    stop_below: float = 0.0


@dataclass
class DraftOutput:
    tokens: torch.Tensor  # [B, num_steps] int64, target-vocabulary ids
    scores: torch.Tensor  # [B, num_steps] float32 in [0, 1]: per-position acceptance predictor
    # optional, host list: tokens actually proposed per request (<= num_steps; the rest of the row is
    # filler with score 0). A fixed plan verifies at most this many (RoundRunner); None = num_steps.
    lengths: list[int] | None = None
    # optional, host list, set by a drafter that applied the batch's confidence stop (`stop_below`) itself: per
    # request, the steps up to and including the first whose path probability fell below it (num_steps when none),
    # exactly adaptive/scoring.confident_lengths(scores, stop_below); None = the round runner computes that
    confident: list[int] | None = None


class Drafter(Protocol):
    kind: str  # "mtp" | "dspark" | "suffix" | "mtp+suffix"
    max_steps: int  # most tokens one call may propose (MTP: any k; DSpark: its width w)
    capture_layers: tuple[int, ...]  # target layers whose outputs form h_p (empty = last layer)

    def allocate(self, num_slots: int, max_len: int) -> None:
        """Create the draft's own per-slot caches (called once by the runner)."""

    def draft(self, batch: DraftBatch) -> DraftOutput:
        """Refresh the context from new entries, then propose `batch.num_steps` tokens per request."""

    # Optional (start-up calibration, issue 13). A drafter whose per-slot state is *positional* (what
    # it holds for position p depends only on the entries <= p, and a refresh overwrites whatever
    # it covers, as MTP's and DSpark's caches) implements `copy_slot`; calibration then forks one
    # prefilled request into many slots and rewinds requests by length. Drafters without it get
    # separately prefilled synthetic requests (slower, same semantics): see `copy_draft_slot`.
    def copy_slot(self, src: int, dst: int, length: int) -> bool:
        """Copy slot `src`'s state of positions [0, length) into slot `dst`; False = not supported."""
        return False

    # Optional (issue 10), found with getattr: `reads_tokens = True` asks for `DraftBatch.tokens_host`;
    # `observe(round_id, verify_lens, num_accepted)` receives every completed round's outcome from the
    # engine's result path (the drafter applies it with the lag `set_lag(lag)` gives: 1, or 2 with
    # schedule overlap); `release_slot(slot)` says the request in `slot` finished.


def copy_draft_slot(drafter, src: int, dst: int, length: int) -> bool:
    """`drafter.copy_slot(...)` where it exists (the protocol method is optional); False otherwise."""
    fn = getattr(drafter, "copy_slot", None)
    return bool(fn(src, dst, length)) if fn is not None else False


def supports_copy_slot(drafter) -> bool:
    """True if the drafter declares positional per-slot state it can copy (see `Drafter.copy_slot`)."""
    return drafter is not None and callable(getattr(drafter, "copy_slot", None))
