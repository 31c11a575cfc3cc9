"""RoundRunner: one round on the device — draft, verify (ragged), sample, accept.

The engine hands over the scheduled chunks and a `RoundPlan`; the runner returns a `RoundResult`
of Python lists. On an accelerator everything between the draft and the result stays on the
device: the draft tokens are scattered into the target's input rows by index, acceptance is
counted with tensor ops (`sampling.verify.count_accepted`), and the round ends with one
device-to-host transfer of the results (R-C4). On CPU there is no transfer to save, and those
tensor ops were ~1.5% of a batch-1 MTP round (a dozen small ops, each paying torch's dispatch), so
the runner reads the draft tokens as a list, writes them into the rows it builds, and counts
acceptance over the lists with the same rule (`host_accept`; both paths are tested to give the
same tokens). There it also samples random (temperature > 0) rows only as deep as each request's
acceptance (sampling/verify_rows.py): a row after a rejection is never sampled, so speculation pays one
random row per committed token, as plain decoding does.

It also keeps each request's pending *refresh entries* (drafts/base.py): the target features of
every committed position and the token after it, handed to the drafter at its next call. Rounds
that do not draft (the adaptive modes' plain rounds) leave them pending; a request whose entries
pass `max_pending` (default 1024 positions) hands all but the newest over in a refresh-only call
(num_steps 0) at the end of the round (the newest is where the next draft starts from), so a long
stretch of plain rounds holds at most that many positions of features per request (DSpark: 3
capture layers x 576 fp32 = 6.9 KB per position on the bundled model; 16 requests x 4096 tokens were
450 MB unbounded, now at most 113 MB) at the price of one batched draft refresh per request every
`max_pending` plain rounds, which a later draft would have paid anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..drafts.base import DraftBatch, Drafter, DraftOutput
from ..rounds import RoundPlan, RoundResult
from ..sampling.sampler import SamplingTensors, sample
from ..sampling.seeding import row_generators
from ..sampling.verify import count_accepted, count_accepted_host
from ..sampling.verify_rows import row_groups, sample_rows_until_rejected
from .model_runner import ModelRunner


DEFAULT_MAX_PENDING = 1024


@dataclass
class _Pending:
    start: int  # position p of the first entry not yet given to the drafter
    # per round, (that round's compact [rows, F] features, first row, row count): sliced only when the drafter
    # reads them (`rows`); a request whose entries wait through a stretch of plain rounds and then finishes
    # never pays for the slices
    hidden: list[tuple[torch.Tensor, int, int]] = field(default_factory=list)
    next_tokens: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.next_tokens)

    def rows(self) -> list[torch.Tensor]:
        """The pending features as [n_i, F] views, oldest first."""
        return [f[a:a + n] for f, a, n in self.hidden]


class RoundRunner:
    def __init__(self, runner: ModelRunner, drafter: Drafter | None, default_generator: torch.Generator,
                 verify_controller=None):
        self.runner, self.drafter = runner, drafter
        self.verify_controller = verify_controller  # adaptive.verify_controller.VerifyController or None
        self.device = runner.device
        self.default_generator = default_generator
        self.pending: dict[str, _Pending] = {}
        self.max_pending = DEFAULT_MAX_PENDING  # positions of pending entries per request before a refresh-only call
        self.capture_layers = tuple(drafter.capture_layers) if drafter else ()
        # issue 10: drafters that read committed tokens (Suffix) get them as host lists, and hear
        # which slot's request finished (release_slot)
        self.reads_tokens = bool(getattr(drafter, "reads_tokens", False))
        self._release_slot = getattr(drafter, "release_slot", None)
        self._slot_of: dict[str, int] = {}
        # start-up calibration only (engine/calibrate.py): a clock that times each draft call, whose
        # seconds accumulate in draft_seconds; serving leaves it None and times nothing
        self.draft_clock = None
        self.draft_seconds = 0.0
        # acceptance on the host from lists (CPU: free) or on the device with one read-back (module docstring)
        self.host_accept = self.device.type == "cpu"
        # random rows sampled only as deep as the acceptance (host path only; bench/verify_rows.py turns it off
        # to measure what it saves)
        self.rows_until_rejected = self.host_accept

    def pending_entries(self, request_id: str) -> int:
        """Refresh entries the request's next drafting round will hand to the drafter (deferred refresh)."""
        p = self.pending.get(request_id)
        return p.length if p is not None else 0

    def release(self, request_id: str) -> None:
        self.pending.pop(request_id, None)
        slot = self._slot_of.pop(request_id, None)
        if slot is not None and self._release_slot is not None:
            self._release_slot(slot)

    # ------------------------------------------------------------------------------------
    def run(self, chunks, plan: RoundPlan) -> RoundResult:
        """chunks: ScheduledChunk list (decoding chunks carry exactly the newest token)."""
        decoding = [c for c in chunks if c.is_decode]
        K = plan.num_steps if self.drafter is not None else 0
        lens = list(plan.verify_lens) if K else [0] * len(decoding)
        if not any(lens) and not plan.exact:  # no request may verify a draft token (prefill spent the
            K = 0  # row budget); calibration's exact plans draft regardless
        # A round without draft steps (k = 0, an adaptive round predicted to lose, or a round in which
        # no request may verify a draft token: its draft would be thrown away) does not call
        # the drafter at all: it costs what a plain round costs (issue 13, the plain floor). Its
        # refresh entries stay pending and reach the drafter, in order, at its next drafting round;
        # the draft's caches are positional (drafts/base.py), so a deferred refresh writes exactly
        # what per-round refreshes would have written.
        draft, subset = None, plan.draft_only if K else None
        stop_below = plan.stop_below if plan.admission == "fixed" and not plan.exact else 0.0
        if self.drafter is not None and decoding and K:
            t0 = self.draft_clock() if self.draft_clock is not None else 0.0
            if subset is None:
                draft = self._draft(decoding, K, plan.round_id, stop_below)
            else:  # the others propose nothing (score 0: never admitted) and keep their entries pending
                draft = _widen(self._draft([decoding[i] for i in subset], K, plan.round_id, stop_below), subset,
                               len(decoding))
                lens = [L if i in subset else 0 for i, L in enumerate(lens)]
            if self.draft_clock is not None:
                self.draft_seconds += self.draft_clock() - t0
        if K and decoding and plan.admission == "fixed" and draft.lengths is not None and not plan.exact:
            lens = [min(L, n) for L, n in zip(lens, draft.lengths)]  # nothing proposed, nothing verified
        if K and decoding and stop_below > 0:  # the draft step's confidence stop (fixed, non-exact plans)
            confident = draft.confident
            if confident is None:  # the drafter did not apply the stop itself (drafts/base.py)
                from ..adaptive.scoring import confident_lengths
                confident = confident_lengths(draft.scores, stop_below)
            lens = [min(L, n) for L, n in zip(lens, confident)]
        if K and decoding and plan.admission != "fixed":
            lens = self._admit(draft, plan, lens, decoding)

        # Target input rows: prefill chunks as scheduled; decoding request b reads [t_n, d_1..d_Lb].
        d_host = draft.tokens.tolist() if self.host_accept and draft is not None and K else None
        rows, sample_rows, n_sampled, draft_dst, draft_src = [], [], [], [], []
        sample_pos = []  # absolute position each sampled row samples (seeded requests' noise, R-B5)
        offset, b = 0, 0
        for c in chunks:
            if c.is_decode:
                L = lens[b]
                if d_host is not None:
                    rows.append(c.token_ids + d_host[b][:L])
                else:
                    rows.append(c.token_ids + [0] * L)  # draft tokens are scattered in below
                    draft_dst += range(offset + 1, offset + 1 + L)
                    draft_src += range(b * K, b * K + L)
                sample_rows += range(offset, offset + 1 + L)
                sample_pos += range(c.start + 1, c.start + 2 + L)
                n_sampled.append(1 + L)
                b += 1
            else:
                rows.append(c.token_ids)
                if c.sample:
                    sample_rows.append(offset + len(c.token_ids) - 1)
                    sample_pos.append(c.start + len(c.token_ids))
                n_sampled.append(int(c.sample))
            offset += len(rows[-1])
        inputs = self.runner.prepare([c.request.slot for c in chunks], [c.start for c in chunks], rows, sample_rows)
        if draft_dst:
            idx = torch.tensor(draft_dst, dtype=torch.long, device=self.device)
            src = torch.tensor(draft_src, dtype=torch.long, device=self.device)
            inputs.input_ids[idx] = draft.tokens.reshape(-1)[src]
        out = self.runner.forward(inputs, self.capture_layers)

        # Sample every sampled row from its request's filtered target distribution (R-B3).
        # Random rows with the drafts on the host: only as deep as each request's acceptance (verify_rows.py).
        row_params = [c.request.params for c, n in zip(chunks, n_sampled) for _ in range(n)]
        y = y_host = None
        if self.rows_until_rejected and d_host is not None and any(p.temperature > 0 for p in row_params):
            groups = row_groups([c.is_decode for c in chunks], n_sampled, d_host, lens)
            y_host = sample_rows_until_rejected(out.logits, groups, row_params, sample_pos, self.default_generator)
        else:
            row_gens = row_generators([p.seed for p in row_params], sample_pos, self.device)
            tensors = SamplingTensors.from_params(row_params, self.device)
            y = sample(out.logits, tensors, row_gens, default_generator=self.default_generator)

        # Acceptance for decoding requests, on the device: y laid out as [B, K + 1].
        accepted = None
        if decoding and K and d_host is None:
            grid_dst, y_src, off, b = [], [], 0, 0
            for c, n in zip(chunks, n_sampled):
                if c.is_decode:
                    grid_dst += range(b * (K + 1), b * (K + 1) + n)
                    y_src += range(off, off + n)
                    b += 1
                off += n
            grid = torch.full((len(decoding) * (K + 1),), -1, dtype=torch.long, device=self.device)
            grid[torch.tensor(grid_dst, device=self.device)] = y[torch.tensor(y_src, device=self.device)]
            lens_t = torch.tensor(lens, dtype=torch.long, device=self.device)
            accepted = count_accepted(draft.tokens, grid.view(-1, K + 1), lens_t)

        # The round's one device-to-host transfer.
        if y_host is None:
            y_host = y.tolist()
        if d_host is not None:
            acc_host = count_accepted_host(d_host, y_host, lens, [c.is_decode for c in chunks], n_sampled)
        else:
            acc_host = accepted.tolist() if accepted is not None else [0] * len(decoding)
            d_host = draft.tokens.tolist() if draft is not None and K else [[] for _ in decoding]
        s_host = draft.scores.tolist() if draft is not None and K else [[] for _ in decoding]
        if subset is not None:  # scores only of the requests that drafted (the controller's feedback)
            s_host = [s if i in subset else [] for i, s in enumerate(s_host)]

        new_tokens, entries, row, yi, b = [], [], 0, 0, 0
        for c, q, n in zip(chunks, (len(r) for r in rows), n_sampled):
            req = c.request
            if c.is_decode:
                m = acc_host[b]
                toks = d_host[b][:m] + [y_host[yi + m]]
                entries.append((req.request_id, c.start, row, m + 1, toks))
                b += 1
            elif c.sample:
                toks = [y_host[yi]]
                entries.append((req.request_id, c.start, row, q, c.token_ids[1:] + toks))
            else:
                toks = []
                following = c.token_ids[1:] + req.tokens(c.start + q, c.start + q + 1)
                entries.append((req.request_id, c.start, row, q, following))
            new_tokens.append(toks)
            row += q
            yi += n
        self._add_entries(out, entries)
        if self.drafter is not None and self.max_pending and decoding:
            over = [c for c in decoding if self.pending_entries(c.request.request_id) > self.max_pending]
            if over:  # bound what a long stretch of plain rounds holds (module docstring)
                self._refresh_all_but_newest(over, plan.round_id)
        return RoundResult(new_tokens, lens, acc_host, s_host)

    def _admit(self, draft: DraftOutput, plan: RoundPlan, caps: list[int], decoding) -> list[int]:
        """Per-request verify lengths from the current round's scores (R-D1, R-D3, R-D4).

        Scores only rank candidates: in "budget" mode the row count was fixed beforehand from
        lagged feedback; in "sync" mode the early stop keeps admission non-anticipating. The
        lengths are read back to lay out the ragged verify (free on CPU; the one extra sync on
        CUDA, where a device-side layout would avoid it).
        """
        from ..adaptive.scoring import path_probabilities

        P = path_probabilities(draft.scores)
        caps_t = torch.tensor(caps, dtype=torch.long, device=self.device)
        if plan.admission == "budget":
            if not isinstance(plan.token_value, (int, float)):  # a closed batch's per-request weights rank the rows
                P = P * torch.tensor(plan.token_value, dtype=P.dtype, device=P.device)[:, None]
            return self.verify_controller.allocate(P, plan.row_budget, caps_t).tolist()
        kv_len = max(c.start for c in decoding)
        return list(self.verify_controller.admit(P, round_id=plan.round_id, max_lens=caps, kv_len=kv_len,
                                                 token_value=plan.token_value))

    # ------------------------------------------------------------------------------------
    def _add_entries(self, out, entries) -> None:
        """Append each request's new refresh entries (request id, position, first row, count, next
        tokens) to its pending list. The rows every entry needs are gathered in one op per round into a
        compact [rows, F] tensor (the capture layers concatenated), and each request keeps (that tensor,
        its first row, its row count): entries can wait many rounds (deferred refresh), and the compact
        tensor keeps nothing alive but entry rows. Per request a slice + copy was ~0.3% of a plain-floor
        round at B = 16; the slice itself waits for the drafter (_Pending.rows), since in the plain floor
        most entries are never drafted from (their request finishes first)."""
        if self.drafter is None or not entries:
            return
        src = self._captured_rows(out)
        if sum(n for _, _, _, n, _ in entries) == src.shape[0]:
            feats = src.clone() if not self.capture_layers else src  # every row is an entry row
        else:
            index = [r for _, _, row, n, _ in entries for r in range(row, row + n)]
            feats = src.index_select(0, torch.tensor(index, dtype=torch.long, device=src.device))
        at, pending = 0, self.pending
        for request_id, pos, _, n, next_tokens in entries:
            p = pending.get(request_id)
            if p is None:
                p = pending[request_id] = _Pending(start=pos)
            assert p.start + p.length == pos, "refresh entries must arrive without gaps"
            p.hidden.append((feats, at, n))
            p.next_tokens += next_tokens[:n]
            at += n

    def _captured_rows(self, out) -> torch.Tensor:
        """The drafter's features of every row of the round: the capture layers' outputs side by side
        (a new tensor), or the last hidden state (the forward's own tensor)."""
        if self.capture_layers:
            return torch.cat(out.captured, dim=-1)
        return out.hidden

    def _refresh_all_but_newest(self, chunks, round_id: int | None) -> None:
        """A refresh-only call (num_steps 0) with all but each request's newest pending entry. The
        newest stays pending: a drafting round proposes from the entry of the request's last committed
        token, so a request must never be left without one (the caches are positional: handing the
        entries over in two calls writes what one call would)."""
        kept = {}
        for c in chunks:
            rid = c.request.request_id
            p = self.pending[rid]
            f, a, n = p.hidden[-1]
            kept[rid] = _Pending(start=p.start + p.length - 1, hidden=[(f, a + n - 1, 1)], next_tokens=p.next_tokens[-1:])
            head = p.hidden[:-1] + ([(f, a, n - 1)] if n > 1 else [])
            self.pending[rid] = _Pending(start=p.start, hidden=head, next_tokens=p.next_tokens[:-1])
        self._draft(chunks, 0, round_id)
        self.pending.update(kept)

    def _draft(self, decoding, num_steps: int, round_id: int | None = None, stop_below: float = 0.0) -> DraftOutput | None:
        """Refresh every decoding request's draft context and propose `num_steps` tokens each."""
        batch_pending = [self.pending.pop(c.request.request_id) for c in decoding]
        tokens_host = None
        if self.reads_tokens:
            tokens_host = [[c.request.token_at(p.start)] + p.next_tokens for c, p in zip(decoding, batch_pending)]
            for c in decoding:
                self._slot_of[c.request.request_id] = c.request.slot
        batch = DraftBatch(
            slots=[c.request.slot for c in decoding],
            entry_starts=[p.start for p in batch_pending],
            entry_lens=[p.length for p in batch_pending],
            hidden=torch.cat([h for p in batch_pending for h in p.rows()], dim=0),
            next_tokens=torch.tensor([t for p in batch_pending for t in p.next_tokens], dtype=torch.long, device=self.device),
            num_steps=num_steps,
            tokens_host=tokens_host,
            round_id=round_id,
            stop_below=stop_below,
        )
        return self.drafter.draft(batch)


def _widen(draft: DraftOutput, subset: tuple[int, ...], B: int) -> DraftOutput:
    """A draft of the requests `subset` laid out for all B decoding requests: the others get filler
    tokens with score 0 and proposal length 0."""
    index = torch.tensor(subset, dtype=torch.long, device=draft.tokens.device)
    tokens = draft.tokens.new_zeros(B, draft.tokens.shape[1]).index_copy_(0, index, draft.tokens)
    scores = draft.scores.new_zeros(B, draft.scores.shape[1]).index_copy_(0, index, draft.scores)
    def spread(per_subset: list[int] | None) -> list[int] | None:  # the others verify nothing (their caps are 0)
        if per_subset is None:
            return None
        out = [0] * B
        for i, n in zip(subset, per_subset):
            out[i] = n
        return out

    return DraftOutput(tokens, scores, spread(draft.lengths), spread(draft.confident))
