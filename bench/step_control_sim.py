"""The adaptive draft step's decisions without timing noise: the real controller on simulated acceptance (issue 13).

A timed cell on this project's 2-vCPU VMs moves by ±5-10% between repeats, more than the 2-3% a
controller rule is worth, so rules are compared here first, where only the decisions vary. The
engine's `DraftStepController` (with the policy of the command line) plans every batch; each of the
batch's B requests then accepts its first j draft tokens with a per-position conditional rate
alpha_1 = a, alpha_i = min(0.95, a * growth^(i - 1)) (Bernoulli, seeded), the round's tokens are
sum(m + 1), and its time is the cost table's entry for the chosen k; a probe drafts for a quarter of
the batch, as in the engine (engine/control.py), and costs plain plus that share of the k-step round's
extra, and a request's deferred draft refresh costs `--refresh_ms` per position. The result, for each a, is the
throughput over `--batches` batches divided by the best fixed k's (plain included) expected
throughput under the same table and rates: 1.00 = the controller lost nothing to exploration or
noise. Medians over `--seeds`.

Tables (`--tables`, name=ms at k = 0..k_max, ';'-separated): whole-round costs of one Bcap, e.g.
from a start-up log or bench/step_cost_check.py. The defaults are this VM's (2026-12-03, AMD EPYC,
fp16w): B = 1 `27.6,33.2,36.0,40.2` and B = 16 `101.5,171.9,234.1,300` (k = 3 extrapolated).

    python bench/step_control_sim.py
    python bench/step_control_sim.py --policy='{"explore_overhead": 1e9}'   # the scaling off
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adaspec.adaptive.floor import probe_requests  # noqa: E402
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy  # noqa: E402
from bench.common import markdown_table, write_json  # noqa: E402

DEFAULT_TABLES = "B1=27.6,33.2,36.0,40.2;B16=101.5,171.9,234.1,300"


def rates(a: float, k_max: int, growth: float) -> np.ndarray:
    return np.minimum(0.95, a * growth ** np.arange(k_max))


def fixed_throughputs(alpha: np.ndarray, costs: list[float], batch: int) -> list[float]:
    """Expected tokens per ms of every fixed k (0 = plain) under conditional rates `alpha`."""
    survival = np.cumprod(alpha)
    return [batch * (1.0 + float(survival[:k].sum())) / costs[k] for k in range(len(costs))]


def accepted_drafts(rng, alpha: np.ndarray, drafting: np.ndarray, k: int) -> np.ndarray:
    """Accepted draft tokens per request of one round: each request's leading Bernoulli successes at its
    per-position rates (`alpha`: [requests, k_max]), capped at k; 0 where it did not draft."""
    hits = rng.random(alpha.shape) < alpha
    # accepted = leading hits (argmin finds the first miss; a sentinel miss ends each row)
    m = np.argmin(np.concatenate([hits, np.zeros((len(alpha), 1), bool)], axis=1), axis=1)
    return np.where(drafting, np.minimum(m, k), 0)


def simulate(alpha: np.ndarray, costs: list[float], batch: int, policy: StepPolicy, batches: int, seed: int,
             probe_interval: int, refresh_ms: float = 0.0, partial: bool = True) -> tuple[float, dict[int, int], int]:
    """(tokens per ms, batches per k, probes) of the controller over `batches` batches.

    As the engine runs them (engine/control.py): a probe drafts for `floor.probe_requests(B)` requests (those
    with the fewest skipped positions), charged plain + that share of the k-step round's extra cost; a
    request that drafts pays `refresh_ms` for each position committed in its rounds without a draft (the
    deferred refresh its draft catches up on; the table's k-step rounds include the steady-state refresh).
    `partial` False: probes are whole batches, as this simulator charged them before stop 39."""
    rng = np.random.default_rng(seed)
    k_max = len(costs) - 1
    ctl = DraftStepController(k_max, policy, lambda bcap, k: costs[k], lambda b: batch, lag=1,
                              probe_interval=probe_interval)
    pending = np.zeros(batch, dtype=np.int64)  # positions each request's draft has not seen
    tokens = ms = 0.0
    for n in range(batches):
        k = ctl.plan(batch, round_id=n)
        drafting = np.ones(batch, bool) if k else np.zeros(batch, bool)
        cost = costs[k]
        if k and ctl.last_probe and partial:
            drafting[:] = False
            drafting[np.argsort(pending, kind="stable")[:probe_requests(batch)]] = True
            cost = costs[0] + (costs[k] - costs[0]) * drafting.sum() / batch
        m = accepted_drafts(rng, np.broadcast_to(alpha, (batch, k_max)), drafting, k)
        lens = np.where(drafting, k, 0)
        ctl.observe(lens.tolist(), m.tolist(), round_id=n)
        cost += refresh_ms * float(pending[drafting].sum())
        pending = np.where(drafting, 0, pending + m + 1)
        tokens += float(np.sum(m + 1))
        ms += cost
    return tokens / ms, dict(sorted(ctl.k_histogram.items())), ctl.probe_rounds


def parse_tables(text: str) -> dict[str, tuple[int, list[float]]]:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, values = part.partition("=")
        if not name.startswith("B") or not name[1:].isdigit() or not values:
            raise SystemExit(f"--tables: {part!r} is not B<batch>=ms,ms,... (e.g. B16=101.5,171.9,234.1)")
        try:
            costs = [float(v) for v in values.split(",")]
        except ValueError:
            raise SystemExit(f"--tables: {values!r} is not a list of numbers") from None
        if len(costs) < 2 or min(costs) <= 0:
            raise SystemExit(f"--tables: {name} needs positive costs for k = 0 and at least k = 1")
        out[name] = (int(name[1:]), costs)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--tables", default=DEFAULT_TABLES, help="';'-separated B<batch>=ms at k = 0..k_max")
    p.add_argument("--alphas", default="0.1,0.15,0.2,0.25,0.3,0.35,0.45,0.55,0.7,0.8",
                   help="comma-separated first-position acceptance rates a")
    p.add_argument("--growth", type=float, default=1.1, help="alpha_i = a * growth^(i-1), capped at 0.95")
    p.add_argument("--batches", type=int, default=2000, help="batches per simulated run")
    p.add_argument("--seeds", type=int, default=3, help="seeded runs per cell (median reported)")
    p.add_argument("--probe_interval", type=int, default=20, help="the engine's probe interval at k = 0")
    p.add_argument("--refresh_ms", type=float, default=0.0,
                   help="ms per position a request's draft catches up on after rounds without drafting")
    p.add_argument("--whole_probes", action="store_true",
                   help="charge probes as whole batches (as before stop 39; default: a quarter of the batch drafts, "
                        "as in the engine)")
    p.add_argument("--policy", default="{}", help="StepPolicy fields as JSON, e.g. '{\"explore_overhead\": 1e9}'")
    p.add_argument("--json_out", default=None, help="write every cell to this JSON file")
    args = p.parse_args(argv)
    try:
        policy = StepPolicy(**json.loads(args.policy))
        alphas = [float(a) for a in args.alphas.split(",")]
    except (ValueError, TypeError) as e:
        raise SystemExit(f"--policy / --alphas: {e}") from None
    if args.batches < 1 or args.seeds < 1:
        raise SystemExit("--batches and --seeds must be >= 1")
    if not args.refresh_ms >= 0:
        raise SystemExit(f"--refresh_ms must be >= 0 (ms per deferred position), got {args.refresh_ms}")
    tables = parse_tables(args.tables)
    print(f"# policy {policy}; {args.batches} batches x {args.seeds} seeds; alpha_i = a * {args.growth:g}^(i-1)")
    cells, rows = [], []
    for name, (batch, costs) in tables.items():
        for a in alphas:
            alpha = rates(a, len(costs) - 1, args.growth)
            fixed = fixed_throughputs(alpha, costs, batch)
            best = int(np.argmax(fixed))
            runs = [simulate(alpha, costs, batch, policy, args.batches, s, args.probe_interval, args.refresh_ms,
                             not args.whole_probes) for s in range(args.seeds)]
            ratio = statistics.median(r[0] for r in runs) / fixed[best]
            hist = runs[0][1]
            share = {k: round(v / args.batches, 3) for k, v in hist.items()}
            cells.append({"table": name, "a": a, "best_fixed_k": best, "fixed_x_plain": [f / fixed[0] for f in fixed],
                          "adaptive_x_best": ratio, "k_share_seed0": share, "probes_seed0": runs[0][2]})
            rows.append([name, f"{a:g}", f"k={best} ({fixed[best] / fixed[0]:.3f}x plain)", f"{ratio:.3f}",
                         " ".join(f"{k}:{100 * v:.0f}%" for k, v in share.items()), str(runs[0][2])])
    print(markdown_table(["table", "a", "best fixed", "adaptive / best fixed", "k share (seed 0)", "probes"], rows))
    for name in tables:
        worst = min(c["adaptive_x_best"] for c in cells if c["table"] == name)
        print(f"{name}: worst cell {worst:.3f}x the best fixed setting")
    if args.json_out:
        write_json(args.json_out, {"args": vars(args), "policy": policy.__dict__, "cells": cells})


if __name__ == "__main__":
    main()
