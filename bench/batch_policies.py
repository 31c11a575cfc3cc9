"""Which candidates should a batch verify? Replay per-row policies of the MTP draft at batch B (issue 13).

bench/step_policies.py replays per-round step counts at B = 1, where one more target row costs
little and the first draft step has to run before its probability is known: no causal rule won
more than ~2% over the best fixed k there. At B >= 4 on a CPU the target's linears are compute-
bound: a verify row costs nearly what a plain row costs (bench/results/s40/row_costs.md), while a
draft step for the whole batch costs about as much as one row. Then *which* rows a round verifies
matters, and the draft's (calibrated) probability can choose them per request: what adaptive
target verify over MTP candidates (`--speculative_algorithm=MTP --enable_adaptive_target_verify`,
R-D3's admission over MTP's cumulative draft probabilities) does.

The MTP draft runs teacher-forced over the held-out sequences (the float32 target's greedy
continuations of held-out code, chat and prose prompts; `<data_dir>/heldout_eval.pt`, as
bench/step_policies.py), giving per anchor the accepted count m and the cumulative draft
probabilities. B slots then decode the sequences of the chosen source(s) in lockstep with
continuous batching (a finished sequence's slot takes the next one, sources interleaved for
"mixed"); accounting stops when the queue can no longer fill every slot. Each round is charged

    cost = T(rows) + D(w)        (no draft: T(B))

with T the target's ms for a round of `rows` rows at this batch size (`--target_ms`, linear between
the points given) and D(w) the draft call's ms with w steps (`--draft_ms`). Policies:

- `plain`; `fixed k`: every request drafts k and verifies all k;
- `sync w`: draft w, verify what adaptive/verify_budget.sync_admission admits (the engine's own
  code, with this cost model); `sync w + floor`: the same, but a round drafts only when
  sync_gain_from_lagged on the previous round's probabilities predicts a gain (the plain floor);
- `dynamic w<=3 s=S`: draft step by step; after step j take step j + 1 only if sync_admission over
  the positions drafted so far plus a guess of the next one (P_j x S, S a typical conditional
  acceptance) predicts more tokens per ms than stopping now, the extra step's cost included; then
  verify what sync_admission admits. Lossless as the engine's rules are: the step count and the
  admitted rows depend only on the draft's own probabilities, never on the target's samples;
- `oracle`: per round the w and per-request lengths (accepted drafts only) that maximise tokens per
  ms with the acceptance known: no causal controller can beat it.

    python bench/batch_policies.py --data_dir=runs/heldout_s40 --batch_size=8 \
        --target_ms=8:70.9,16:106.8,24:143.9,32:184.7 --draft_ms=0:2.98,1:4.99,2:9.86,3:14.94

(`--data_dir`: any directory; the held-out set is built there by `adaspec train-draft --kind=both`, or
by calling adaspec.training.selfdistill.heldout_eval_set as bench/results/s40/build_heldout.py does.)
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.common import markdown_table  # noqa: E402
from bench.step_policies import held_out_anchors  # noqa: E402

SOURCES = ("code", "chat", "prose")


def parse_points(text: str, flag: str) -> dict[int, float]:
    try:
        pts = {int(a): float(b) for a, b in (item.split(":") for item in text.split(",") if item)}
    except ValueError:
        raise SystemExit(f"{flag} takes comma-separated N:ms pairs, got {text!r}") from None
    if len(pts) < 2 or any(v <= 0 for v in pts.values()):
        raise SystemExit(f"{flag} needs at least two points, every ms > 0")
    return dict(sorted(pts.items()))


def interpolate(points: dict[int, float]):
    xs, ys = np.array(list(points), dtype=float), np.array(list(points.values()))

    def f(x: float) -> float:
        if x <= xs[-1]:
            return float(np.interp(x, xs, ys)) if x >= xs[0] else float(ys[0] + (x - xs[0]) * (ys[1] - ys[0]) / (xs[1] - xs[0]))
        return float(ys[-1] + (x - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
    return f


def stream(sequences, source: str | None):
    """Sequences of one source, or all interleaved (code, chat, prose, code, ...) for the mixed stream."""
    by = {s: [anchors for src, anchors in sequences if src == s] for s in SOURCES}
    if source is not None:
        return list(by[source])
    out = []
    for group in itertools.zip_longest(*by.values()):
        out += [a for a in group if a is not None]
    return out


def replay(queue, B: int, policy, T, D) -> float:
    """Tokens per ms of B lockstep slots decoding `queue` (lists of (m, cum) anchors) under
    `policy(ms: list of (m, cum), state) -> (w drafted or None for a plain round, lengths [B])`."""
    queue = list(queue)
    slots = [[queue.pop(0), 0] for _ in range(min(B, len(queue)))]
    if len(slots) < B:
        raise SystemExit(f"only {len(slots)} sequences for batch {B}")
    tokens = ms = 0.0
    state: dict = {}
    while True:
        current = [seq[n] for seq, n in slots]
        w, lens = policy(current, state)
        accepted = [min(m, l) for (m, _), l in zip(current, lens)]
        ms += T(B) if w is None else T(B + sum(lens)) + D(w)
        tokens += B + sum(accepted)
        for slot, a in zip(slots, accepted):
            slot[1] += a + 1
        for slot in slots:
            if slot[1] >= len(slot[0]):
                if not queue:
                    return tokens / ms
                slot[:] = [queue.pop(0), 0]


def policies(B: int, k_max: int, T, D):
    from adaspec.adaptive.verify_budget import sync_admission, sync_gain_from_lagged

    out = {"plain": lambda cur, st: (None, [0] * B)}
    for k in range(1, k_max + 1):
        out[f"fixed k={k}"] = (lambda k: lambda cur, st: (k, [k] * B))(k)

    def sync(w, floor):
        cost = lambda bcap, rows: T(rows) + D(w)  # noqa: E731
        pad = lambda bcap, rows: rows  # noqa: E731

        def policy(cur, st):
            P = np.array([cum[:w] for _, cum in cur])
            if floor and "last" in st:
                gate = sync_gain_from_lagged([st["last"]], B, B, cost, pad, width=w, plain_cost=T(B))
                if gate.reason == "plain":
                    st["skipped"] = st.get("skipped", 0) + 1
                    # the plain floor still probes now and then (adaptive/floor.py); here every 50th round
                    if st["skipped"] % 50:
                        return None, [0] * B
            st["last"] = P
            return w, sync_admission(P, B, cost, pad).verify_lens
        return policy

    for w in range(1, k_max + 1):
        out[f"sync w={w}"] = sync(w, False)
        out[f"sync w={w} + floor"] = sync(w, True)

    def dynamic(w_max, s_bar):
        """Draft step by step; take step j + 1 only if the admission over the positions drafted so far
        plus the predicted next ones (P_j x s_bar) beats stopping now by more than the step costs."""
        pad = lambda bcap, rows: rows  # noqa: E731

        def value(P, w):
            d = sync_admission(P, B, lambda bcap, rows: T(rows) + D(w), pad)
            return d.predicted, d.verify_lens

        def policy(cur, st):
            full = np.array([cum[:w_max] for _, cum in cur])
            w = 1
            while w < w_max:
                now, _ = value(full[:, :w], w)
                guess = np.concatenate([full[:, :w], full[:, w - 1:w] * s_bar], axis=1)
                nxt, _ = value(guess, w + 1)
                if nxt is None or now is None or nxt <= now:
                    break
                w += 1
            return w, value(full[:, :w], w)[1]
        return policy

    for s_bar in (0.5, 0.7, 0.9):
        out[f"dynamic w<=3 s={s_bar:g}"] = dynamic(k_max, s_bar)

    def oracle(cur, st):
        best = (B / T(B), None, [0] * B)
        for w in range(1, k_max + 1):
            lens = [min(m, w) for m, _ in cur]
            v = (B + sum(lens)) / (T(B + sum(lens)) + D(w))
            if v > best[0]:
                best = (v, w, lens)
        return best[1], best[2]
    out["oracle (acceptance known)"] = oracle
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data_dir", required=True, help="a train-draft --kind=both --data_dir (its heldout_eval.pt)")
    p.add_argument("--draft", default=None, help="MTP draft directory (default: the shipped one)")
    p.add_argument("--batch_size", type=int, default=8, help="requests decoding together (B)")
    p.add_argument("--target_ms", required=True,
                   help="target round ms at this batch size by rows, N:ms pairs (N rows, the first N = B)")
    p.add_argument("--draft_ms", required=True,
                   help="draft call ms at this batch size by steps, w:ms pairs from 0 (refresh only) to k_max")
    args = p.parse_args(argv)
    T = interpolate(parse_points(args.target_ms, "--target_ms"))
    draft_pts = parse_points(args.draft_ms, "--draft_ms")
    k_max = max(draft_pts)
    if sorted(k for k in draft_pts if k > 0) != list(range(1, k_max + 1)):
        p.error(f"--draft_ms needs every step count 1..{k_max}, got {sorted(draft_pts)}")
    D = draft_pts.__getitem__

    try:
        sequences = held_out_anchors(Path(args.data_dir), args.draft, k_max)
    except FileNotFoundError as e:
        p.error(f"--data_dir: {e}")
    cols = ("mixed",) + SOURCES
    table = {name: {s: replay(stream(sequences, None if s == "mixed" else s), args.batch_size, pol, T, D) for s in cols}
             for name, pol in policies(args.batch_size, k_max, T, D).items()}
    fixed = [n for n in table if n == "plain" or n.startswith("fixed")]
    best = {s: max(table[n][s] for n in fixed) for s in cols}
    rows = [[name] + [f"{1000 * v[s]:.1f} ({v[s] / best[s]:.2f}x)" for s in cols] for name, v in table.items()]
    print(f"batch {args.batch_size}: tokens per second of the replay (x the best fixed setting, plain included); "
          f"target ms by rows {args.target_ms}, draft ms by steps {args.draft_ms}; {len(sequences)} held-out sequences")
    print(markdown_table(["policy", *cols], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
