"""The adaptive draft step on simulated *closed batches of unlike requests* (issue 13; step_control_sim.py's sibling).

step_control_sim.py gives every request the same acceptance and never lets a request finish. The bench's
floor cells are neither: four (or eight) held-out prompts of different kinds, each generating `--max_tokens`,
decoding together until the last one ends. Two things then decide a cell that the per-round score does not see:
- the *drain*: a fixed k = 1 lets the requests the draft suits finish first and leaves the others to run in
  smaller rounds (the mixed cell at B = 4: 1.56 tokens per round at 1.6x plain's cost predicts 0.98x plain,
  the cell measures 0.955x);
- the *cold serve*: a paired child serves its prompts twice (A B B A), each time from a cold controller
  (bench/adaptive.py's --reset_controllers): the prior, then one probe's drafts, decide the first rounds.

Here each request i accepts draft position j with rate a_i * growth^(j - 1) (capped at 0.95), a_i spread
evenly over [a - spread, a + spread]; a request leaves after `--max_tokens` tokens, and a round of b running
requests costs the table interpolated between the calibrated buckets (`--tables`, as the engine prices it).
The controller is the engine's (`DraftStepController`, per-request feedback by round id), the probe drafts
for `floor.probe_requests(b)` requests with the fewest window drafts, and a request that drafts after rounds
without drafting pays `--refresh_ms` per position it catches up on. Every fixed k (plain included) runs the
same serves with the same random draws. The result per cell: the controller's serves' total time against the
best fixed k's (1.00 = nothing lost), medians over `--seeds`.

    python bench/step_closed_sim.py --policy='{"floor_confidence": 0}'
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adaspec.adaptive.floor import probe_requests  # noqa: E402
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy  # noqa: E402
from bench.common import markdown_table, write_json  # noqa: E402
from bench.step_control_sim import accepted_drafts, parse_tables  # noqa: E402

# this VM's step tables (stop 43's start-up log, fp16w, one thread): ms of a round at k = 0..3
DEFAULT_TABLES = "B1=25.2,27.6,31.2,36.3;B4=32.4,51.4,63.8,80.8;B8=56.8,90.6,125.9,159.0"


class Costs:
    """Round cost of b running requests at k: the bucket's table, interpolated linearly in b below it."""

    def __init__(self, tables: dict[int, list[float]]):
        self.tables = dict(sorted(tables.items()))
        self.buckets = list(self.tables)

    def pad(self, b: int) -> int:
        return next(x for x in self.buckets if x >= b)

    def __call__(self, b: int, k: int) -> float:
        hi = self.pad(b)
        lo = max((x for x in self.buckets if x < b), default=None)
        if lo is None or hi == b:
            return self.tables[hi][k]
        t = (b - lo) / (hi - lo)
        return (1 - t) * self.tables[lo][k] + t * self.tables[hi][k]


def closed_view(remaining, drafted, accepted, shrink: float = 16.0) -> list[tuple[int, float]] | None:
    """engine/control.py's `_closed_batch`: per request (tokens left, accepted per drafted token over the batch's,
    shrunk towards 1 by `shrink` draft tokens); None for a single request."""
    if len(remaining) < 2:
        return None
    mean = accepted.sum() / drafted.sum() if drafted.sum() else 0.0
    rho = (accepted + shrink * mean) / (drafted + shrink) / mean if mean > 0 else np.ones(len(remaining))
    return [(int(r), float(x)) for r, x in zip(remaining, rho)]


def serve(ctl, costs: Costs, alpha: np.ndarray, max_tokens: int, rng, refresh_ms: float, fixed_k: int | None,
          first_round: int, tag: int) -> tuple[float, int]:
    """One closed batch to its end: (ms, rounds). `fixed_k` None: the controller plans every round."""
    B = len(alpha)
    done = np.zeros(B, dtype=np.int64)
    pending = np.zeros(B, dtype=np.int64)
    drafted, accepted = np.zeros(B), np.zeros(B)  # per request, over its life (the engine's closed view)
    ms, n = 0.0, first_round
    while (running := np.flatnonzero(done < max_tokens)).size:
        b = running.size
        ids = [(tag, int(i)) for i in running]
        if fixed_k is None:
            k = ctl.plan(b, round_id=n, requests=ids, closed=closed_view(max_tokens - done[running],
                                                                          drafted[running], accepted[running]))
            probe = ctl.last_probe
        else:
            k, probe = fixed_k, False
        drafting = np.ones(b, bool) if k else np.zeros(b, bool)
        cost = costs(b, k)
        if k and probe:
            drafting[:] = False
            drafts = np.array([ctl.window.drafts_of(r) for r in ids])
            drafting[np.lexsort((pending[running], drafts))[:probe_requests(b)]] = True
            cost = costs(b, 0) + (costs(b, k) - costs(b, 0)) * drafting.sum() / b
        m = accepted_drafts(rng, alpha[running], drafting, k)
        m = np.minimum(m, max_tokens - done[running] - 1)  # the last token ends the request
        if fixed_k is None:
            ctl.observe(np.where(drafting, k, 0).tolist(), m.tolist(), round_id=n)
        cost += refresh_ms * float(pending[running][drafting].sum())
        pending[running] = np.where(drafting, 0, pending[running] + m + 1)
        done[running] += m + 1
        drafted[running] += np.where(drafting, k, 0)
        accepted[running] += m
        ms += cost
        n += 1
    return ms, n - first_round


def run_cell(alpha, costs, k_max, max_tokens, serves, policy, seed, refresh_ms, probe_interval, reset=True):
    """(controller ms, {fixed k: ms}, controller's k histogram) over `serves` closed batches; `reset`: a cold
    controller for every serve (bench/adaptive.py's --reset_controllers, its default)."""
    out = {}
    for fixed in [None] + list(range(k_max + 1)):
        rng = np.random.default_rng(seed)
        total, n, hist = 0.0, 0, Counter()
        ctl = None
        for s in range(serves):
            if ctl is None or reset:
                if ctl is not None:
                    hist.update(ctl.k_histogram)
                ctl = DraftStepController(k_max, policy, lambda bcap, k: costs.tables[bcap][k], costs.pad, lag=1,
                                          probe_interval=probe_interval, buckets=costs.buckets)
            ms, rounds = serve(ctl, costs, alpha, max_tokens, rng, refresh_ms, fixed, n, s)
            total, n = total + ms, n + rounds
        hist.update(ctl.k_histogram)
        out[fixed] = (total, dict(sorted(hist.items())))
    return out[None][0], {k: out[k][0] for k in range(k_max + 1)}, out[None][1]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--tables", default=DEFAULT_TABLES, help="';'-separated B<batch>=ms at k = 0..k_max (calibrated buckets)")
    p.add_argument("--batch", type=int, default=4, help="requests per closed batch (at most the largest bucket)")
    p.add_argument("--alphas", default="0.3,0.45,0.56,0.65,0.75", help="comma-separated mean first-position rates a")
    p.add_argument("--spread", type=float, default=0.2, help="request i's a_i spread evenly over [a - s, a + s]")
    p.add_argument("--mix", default=None,
                   help="comma-separated per-request first-position rates, one cell (overrides --alphas, --spread and "
                        "--batch; e.g. the bench's mixed B = 4 prompts at a fixed k = 1: 0.37,0.39,0.93,0.71)")
    p.add_argument("--growth", type=float, default=1.1, help="alpha_ij = a_i * growth^(j-1), capped at 0.95")
    p.add_argument("--max_tokens", type=int, default=256, help="tokens each request generates")
    p.add_argument("--serves", type=int, default=2, help="closed batches served in turn by one controller (a paired child: 2)")
    p.add_argument("--warm", action="store_true",
                   help="one controller for all serves (default: a cold one per serve, as bench/adaptive.py's "
                        "--reset_controllers=true)")
    p.add_argument("--seeds", type=int, default=15, help="seeded runs per cell (median reported)")
    p.add_argument("--probe_interval", type=int, default=20, help="the engine's probe interval at k = 0")
    p.add_argument("--refresh_ms", type=float, default=0.05, help="ms per position a request's draft catches up on")
    p.add_argument("--policy", default="{}", help="StepPolicy fields as JSON")
    p.add_argument("--json_out", default=None, help="write every cell to this JSON file")
    args = p.parse_args(argv)
    try:
        policy = StepPolicy(**json.loads(args.policy))
        alphas = [float(a) for a in args.alphas.split(",")]
        mix = [float(a) for a in args.mix.split(",")] if args.mix else None
    except (ValueError, TypeError) as e:
        raise SystemExit(f"--policy / --alphas: {e}") from None
    if mix:
        args.batch, alphas = len(mix), [float(np.mean(mix))]
    costs = Costs({b: c for b, c in parse_tables(args.tables).values()})
    if not 1 <= args.batch <= costs.buckets[-1]:
        raise SystemExit(f"--batch must be in 1..{costs.buckets[-1]} (the largest table)")
    if min(args.max_tokens, args.serves, args.seeds) < 1 or not args.refresh_ms >= 0 or not args.spread >= 0:
        raise SystemExit("--max_tokens, --serves, --seeds must be >= 1; --refresh_ms and --spread >= 0")
    k_max = len(costs.tables[costs.buckets[0]]) - 1
    print(f"# policy {policy}; B = {args.batch}, {args.max_tokens} tokens, {args.serves} serves x {args.seeds} seeds; "
          f"spread {args.spread:g}, growth {args.growth:g}, refresh {args.refresh_ms:g} ms")
    rows, cells = [], []
    for a in alphas:
        a_i = np.clip(np.array(mix) if mix else np.linspace(a - args.spread, a + args.spread, args.batch), 0.0, 0.95)
        alpha = np.minimum(0.95, a_i[:, None] * args.growth ** np.arange(k_max)[None, :])
        runs = [run_cell(alpha, costs, k_max, args.max_tokens, args.serves, policy, s, args.refresh_ms,
                         args.probe_interval, not args.warm) for s in range(args.seeds)]
        best = min(range(k_max + 1), key=lambda k: statistics.median(r[1][k] for r in runs))
        vs_best = statistics.median(r[1][best] / r[0] for r in runs)
        vs_plain = statistics.median(r[1][0] / r[0] for r in runs)
        worst = min(r[1][best] / r[0] for r in runs)
        fixed = {k: statistics.median(r[1][0] / r[1][k] for r in runs) for k in range(k_max + 1)}
        hist = runs[0][2]
        total = sum(hist.values())
        cells.append({"a": a, "best_fixed_k": best, "fixed_x_plain": fixed, "adaptive_x_best": vs_best,
                      "adaptive_x_plain": vs_plain, "worst_seed_x_best": worst, "k_share_seed0": {k: v / total for k, v in hist.items()}})
        rows.append([f"{a:g}", f"k={best}", " ".join(f"{k}:{v:.3f}" for k, v in fixed.items()), f"{vs_plain:.3f}",
                     f"{vs_best:.3f}", f"{worst:.3f}", " ".join(f"{k}:{100 * v / total:.0f}%" for k, v in hist.items())])
    print(markdown_table(["a", "best fixed", "fixed k x plain", "adaptive x plain", "adaptive / best fixed",
                          "worst seed", "k share (seed 0)"], rows))
    print(f"worst cell: {min(c['adaptive_x_best'] for c in cells):.3f}x the best fixed setting")
    if args.json_out:
        write_json(args.json_out, {"args": vars(args), "policy": policy.__dict__, "cells": cells})


if __name__ == "__main__":
    main()
