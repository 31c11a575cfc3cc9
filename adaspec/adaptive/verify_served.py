"""Synchronous verify's drafted rounds priced as served (issue 13; adaspec's extension of R-D3a and R-F).

The sync gate (floor.py, verify_controller.py) weighs a drafted round of G target rows against a plain round with
the start-up cost table. The table is measured on synthetic requests over the whole calibrated KV range and fitted
as one curve per request bucket; where drafting is marginal its few-percent error decides the sign. On the Zen 4 VM
of stop 60 (`bench/results/s60/served_gap.out`), DSpark w = 7 at one request served drafted rounds of 3-5 rows at
1.47-1.75 plain rounds where the table said 1.55-1.90, enough to keep code plain in ~85% of its rounds where a fixed
L2 ran 1.05x plain. The engine times every round anyway, so the controller prices a drafted G from the rounds it
served:

- **Samples** (`ServedRows.record`): per request bucket, the newest `PLAIN_SAMPLES` steady plain rounds give a
  plain reference, their median, once there are `MIN_PLAIN` and while the newest is at most `PLAIN_AGE` rounds old;
  a steady drafted round gives a sample: its ms over that reference. Steady: decode only, not a probe or a probe
  subset, and following a round of the same kind (plain after plain, drafted after drafted) that was itself decode
  only, of the same bucket (`realised_gain` reads a drafted round after either kind). The first drafting round after
  plain ones also catches up on the draft context they deferred (a cost of switching, not of G); the plain rounds of
  a stream that drafts are each request's last, which no draft token may enter, and took 41-67 ms on the Xeon VM of
  stop 63 where the drafted rounds beside them took 38-42 and a plain stream's ~38: as the reference (stops 61-62)
  they made every drafted round look 20-30% cheaper.
  (`SETTLED_ONLY` False restores stop 62's rules, for gate_exp.py's A/B.)
- **Pricing** (`cost_ms`): once a bucket has `MIN_SAMPLES` samples no older than `MAX_AGE` rounds (each G keeps its
  newest `SAMPLES`), every G of it costs the table's price times one correction: the median over those samples of
  served over table cost, relative to the plain round (`POOLED`, stop 63). The table's shape over G is measured in
  3 windows x 32 rounds a point and fitted; one more row costs ~2% of a round at one request, and stop 61's
  correction per G (`POOLED` False; a G without samples took its nearest priced G's) differed between neighbours by
  as much, so its noise set the early stop's marginal prices. Corrections are clipped to [`MIN_CORRECTION`,
  `MAX_CORRECTION`] and kept in steps of `STEP`, so that a new sample rarely changes a price (the controller's
  memoised estimates are dropped when one does: `version`).
- Without samples (a stream that never drafts twice in a row, or never runs plain twice in a row: chat and prose
  keep drafting, where the table's verdict is not marginal) the table alone prices.
- **Realised gain** (`realised_gain`, the gate's third opinion, verify_controller.predicts_gain): whether the newest
  pure drafted rounds holding `REALISED_REQUESTS` request-rounds committed more tokens per ms, as served, than steady
  plain rounds (B tokens over the median of the newest) by `REALISED_MARGIN`. Measured acceptance at measured
  cost, no table and no confidence model: where both of those sit on the margin the stream can flip plain for
  hundreds of rounds (on the Xeon VM of stop 61, one start-up kept 43-56% of DSpark's code rounds plain at 0.89x
  fixed L2). It only adds drafting rounds, and not in a closed batch (token_value < 1: no request waits for a slot),
  whose extra tokens are worth less than a decoded one. Its window is long and its margin small because its errors
  are not symmetric: a false "drafting pays" is corrected by the drafted rounds it brings, a false "it does not" is
  frozen, since plain rounds add no drafted round to the window, until the floor's next probe (50 rounds or more).
  With 16 request-rounds and 3%, chance dips of a window froze DSpark's mixed stream at T = 0.8 plain in 6-13% of
  rounds at 0.958x fixed L2; with 64 and 1%, 3 plain rounds of 772-779, 0.991x (stop 62, `gate_exp.py`). It judges
  from `REALISED_MIN_REQUESTS` on, so that a cold start's first plain verdict is not frozen until the first probe
  (64 request-rounds before a first judgement kept 8% of a code run at T = 0.8 plain, one probe interval).
- **Cold start** (`cold_draft`, stop 63): until the check holds those first `REALISED_MIN_REQUESTS` drafted
  request-rounds of a bucket it cannot judge, and a plain verdict of the other opinions would hold until the first
  probe, whose rounds do not feed it; so a bucket drafts unasked until then, at most `COLD_REQUESTS` request-rounds
  in all (twice a judgement's worth: rounds that also prefill time nothing), not in a closed batch and not when no
  request may verify a token. A stream where drafting loses pays for that once: at one request ~16 drafted rounds.

Nothing here reads the current round's target outputs: it reads completed rounds' times and accepted counts, the
normal result path's feedback (R-C4), and only moves how many drafted tokens a round admits, or whether it drafts,
which every admission already leaves exact. If the drafted rounds that feed `realised_gain` were chosen by the gate
because they were confident, drafting every round dilutes them, the rate falls and the check lets go: it settles
where drafting an ordinary round still pays.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Callable

PLAIN_SAMPLES = 9  # plain rounds whose median is the reference
MIN_PLAIN = 3  # ... once there are this many
PLAIN_AGE = 64  # rounds after which the newest plain round no longer references a sample
SAMPLES = 9  # each G keeps this many newest samples
MIN_SAMPLES = 5
MAX_AGE = 4096  # rounds after which a sample no longer prices
MIN_CORRECTION, MAX_CORRECTION = 0.7, 1.4
STEP = 0.02
REALISED_REQUESTS = 64  # request-rounds of the newest drafted rounds realised_gain reads
REALISED_MIN_REQUESTS = 16  # ... of which it needs at least this many to judge (a cold start's first rounds)
REALISED_MARGIN = 0.01  # ... and how much faster than plain rounds they must have been
COLD_REQUESTS = 2 * REALISED_MIN_REQUESTS  # request-rounds a bucket may draft unasked before its first judgement
POOLED = True  # one served correction per bucket from every G's samples (False: one per G, stop 61's rule)
SETTLED_ONLY = True  # rounds after impure ones or another bucket's, and plain after drafted, time nothing (docstring)
EXPIRE_EVERY = 256  # rounds between checks for prices whose samples all aged out


class ServedRows:
    """Served cost of drafted rounds per (request bucket, padded rows), relative to plain rounds (module
    docstring). `table_ms(bcap, G)` and `plain_ms(bcap)`: the cost table's prices."""

    def __init__(self, table_ms: Callable[[int, int], "float | None"], plain_ms: Callable[[int], "float | None"]):
        self.table_ms, self.plain_ms = table_ms, plain_ms
        self._plain: dict[int, deque[tuple[int, float]]] = {}
        self._samples: dict[tuple[int, int], deque[tuple[int, float]]] = {}
        self._previous: tuple[int, int, bool, bool] | None = None  # (round, bucket, pure, drafted) of the last round
        self._corrections: dict[int, dict[int, float]] = {}  # per bucket, G -> correction (own samples only)
        self.version = 0  # bumped whenever a correction changes
        self._drafted: dict[int, deque[tuple[int, int, float]]] = {}  # per bucket: (requests, tokens, ms), newest last
        self._costs: dict[tuple[int, int], float | None] = {}  # cost_ms's, valid for _costs_version
        self._costs_version = 0
        self.last_round: int | None = None
        self._cold: dict[int, int] = {}  # per bucket: request-rounds drafted by `cold_draft`

    def record(self, round_id: int, bcap: int, G: int | None, ms: float, pure: bool,
               tokens: int | None = None, requests: int = 1) -> None:
        """A completed round of request bucket `bcap`: G padded target rows, or None for a plain round (no draft);
        a drafted round's `tokens` (committed: its requests plus their accepted drafts) feed `realised_gain`."""
        pure = bool(pure) and ms > 0
        previous, self._previous = self._previous, (round_id, bcap, pure, G is not None)
        # a round times nothing unless a pure round of its bucket came just before it (no prefill, probe, or request
        # joining or leaving in between; module docstring, "steady")
        follows = previous is not None and previous[:3] == (round_id - 1, bcap, True)  # a pure round of bcap
        settled = pure and (follows or not SETTLED_ONLY)
        if settled and G is not None and tokens is not None:
            drafted = self._drafted.setdefault(bcap, deque())
            drafted.append((requests, tokens, float(ms)))
            held = sum(r for r, _, _ in drafted)
            while len(drafted) > 1 and held - drafted[0][0] >= REALISED_REQUESTS:
                held -= drafted.popleft()[0]
        steady = pure and follows and G is not None and previous[3]
        self.last_round = round_id
        if round_id % EXPIRE_EVERY == 0:
            self.expire(round_id)
        if not settled:
            return
        if G is None:  # a reference only after a plain round (after a drafted one it is a switch, or a forced one)
            if not (SETTLED_ONLY and previous[3]):
                self._plain.setdefault(bcap, deque(maxlen=PLAIN_SAMPLES)).append((round_id, float(ms)))
            return
        ref = self._reference(bcap, round_id)
        if not steady or ref is None:
            return
        samples = self._samples.setdefault((bcap, G), deque(maxlen=SAMPLES))
        samples.append((round_id, ms / ref))
        self._update(bcap, round_id)

    def _reference(self, bcap: int, now: int) -> float | None:
        plain = self._plain.get(bcap)
        if not plain or len(plain) < MIN_PLAIN or now - plain[-1][0] > PLAIN_AGE:
            return None
        return statistics.median(ms for _, ms in plain)

    def _update(self, bcap: int, now: int) -> None:
        """Recompute the bucket's corrections from its samples no older than MAX_AGE; bump `version` on a change."""
        plain = self.plain_ms(bcap)
        ratios: dict[int, list[float]] = {}  # per G: its kept samples over the table's relative price
        for (b, G), samples in self._samples.items():
            kept = [x for r, x in samples if b == bcap and now - r <= MAX_AGE]
            table = self.table_ms(bcap, G) if kept and plain else None
            if table:
                ratios[G] = [x * plain / table for x in kept]

        def level(cs: list[float]) -> float:  # clipped and kept in steps of STEP
            return round(round(min(MAX_CORRECTION, max(MIN_CORRECTION, statistics.median(cs))) / STEP) * STEP, 6)
        if POOLED:  # one level for the bucket, the table's shape over G (module docstring)
            pooled = [c for cs in ratios.values() for c in cs]
            new = dict.fromkeys(ratios, level(pooled)) if len(pooled) >= MIN_SAMPLES else {}
        else:
            new = {G: level(cs) for G, cs in ratios.items() if len(cs) >= MIN_SAMPLES}
        if new != self._corrections.get(bcap, {}):
            self._corrections[bcap] = new
            self.version += 1

    def realised_gain(self, bcap: int, B: int) -> bool:
        """Whether the newest pure drafted rounds of `bcap` (holding REALISED_REQUESTS request-rounds; from
        REALISED_MIN_REQUESTS on, what there is) committed more tokens per ms, as served, than B tokens per plain round
        (the median of the newest steady plain rounds, whatever their age) by REALISED_MARGIN: measured acceptance at
        measured cost, no table and no confidence model."""
        rates = self._realised(bcap)
        return rates is not None and rates[0] > (1.0 + REALISED_MARGIN) * B / rates[1]

    def realised_ratio(self, bcap: int, B: int) -> float | None:
        """realised_gain's drafted tokens per ms over B tokens per plain round, for the record; None while it cannot
        judge."""
        rates = self._realised(bcap)
        return None if rates is None else rates[0] * rates[1] / B

    def _realised(self, bcap: int) -> tuple[float, float] | None:
        """(the realised window's committed tokens per ms, the median steady plain round's ms); None while there are
        fewer than MIN_PLAIN plain rounds or REALISED_MIN_REQUESTS drafted request-rounds to judge from."""
        drafted, plain = self._drafted.get(bcap), self._plain.get(bcap)
        if not plain or len(plain) < MIN_PLAIN or self._held(bcap) < REALISED_MIN_REQUESTS:
            return None
        return sum(t for _, t, _ in drafted) / sum(ms for _, _, ms in drafted), statistics.median(ms for _, ms in plain)

    def _held(self, bcap: int) -> int:
        """Request-rounds in the bucket's realised-gain window."""
        return sum(r for r, _, _ in self._drafted.get(bcap, ()))

    def cold_draft(self, bcap: int, B: int) -> bool:
        """Whether a round of B requests in `bcap` drafts although no opinion says it pays, because realised_gain
        has not yet held REALISED_MIN_REQUESTS drafted request-rounds of the bucket to judge from: a plain verdict then
        would hold until the floor's first probe (which does not feed the check). Counted: each bucket drafts at most
        COLD_REQUESTS request-rounds so (twice what a judgement needs: rounds that also prefill time nothing)."""
        spent = self._cold.get(bcap, 0)
        if spent >= COLD_REQUESTS or self._held(bcap) >= REALISED_MIN_REQUESTS:
            return False
        self._cold[bcap] = spent + B
        return True

    def correction(self, bcap: int, G: int) -> float:
        """Served over table cost of G rows (relative to plain rounds): its own, the nearest priced G's, or 1."""
        own = self._corrections.get(bcap)
        if not own:
            return 1.0
        if G in own:
            return own[G]
        return own[min(own, key=lambda g: (abs(g - G), -g))]

    def cost_ms(self, bcap: int, G: int) -> float | None:
        """The table's cost of G rows at `bcap` times its served correction (None where the table has none); kept
        until a correction changes (the admission and the gate ask for a few costs every round)."""
        if self._costs_version != self.version:
            self._costs.clear()
            self._costs_version = self.version
        key = (bcap, G)
        if key not in self._costs:
            c = self.table_ms(bcap, G)
            self._costs[key] = None if c is None else c * self.correction(bcap, G)
        return self._costs[key]

    def expire(self, now: int) -> None:
        """Drop the prices whose samples aged out (called once in a while: a sample only ages)."""
        for bcap in list(self._corrections):
            self._update(bcap, now)

    def priced(self) -> dict[int, dict[int, float]]:
        """{bucket: {G: correction}} for the G priced by their own samples (the summary)."""
        return {b: dict(sorted(c.items())) for b, c in sorted(self._corrections.items()) if c}

    @staticmethod
    def describe() -> str:
        level = ("one level per request bucket, over every G's samples" if POOLED else
                 "a level per G (a G not yet timed takes the nearest timed G's)")
        return (f"[adaspec] served pricing (sync verify): a drafted round of G rows is priced at the table's price "
                f"times {level}: the median of served times over the median of the newest {PLAIN_SAMPLES} steady "
                f"plain rounds, relative to the table's plain round (each G's newest {SAMPLES}, once {MIN_SAMPLES} "
                f"steady drafted rounds were timed; within [{MIN_CORRECTION}, {MAX_CORRECTION}]); until then the "
                f"table prices; and a round drafts while the newest drafted rounds ({REALISED_REQUESTS} "
                f"request-rounds, judged from {REALISED_MIN_REQUESTS} on) committed {100 * REALISED_MARGIN:.0f}% more "
                f"tokens per ms than steady plain rounds, outside closed batches, and until it can judge (at most "
                f"{COLD_REQUESTS} request-rounds a bucket) (adaptive/verify_served.py)")
