"""Replay (stop 45): the engine's controller with the stop, where the cost of a ceiling k is the table's cost at the
stop's effective step count, averaged over the data's stop-point distribution (an upper bound for stop-aware pricing)."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3])); sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench.results.s44.replay_conf as rc
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy

from stop_aware import TABLES, anchors, mixed_order, stop_point


def replay(order, costs, tau, price):
    ctl = DraftStepController(5, StepPolicy(confidence_stop=0.0), lambda b, k: price[k], lambda b: 1, lag=1)
    tokens = ms = 0.0; r, last = 0, None; hist = {}
    for rid, (_, anch) in enumerate(order):
        n = 0
        while n < len(anch):
            m, cum = anch[n]
            if last:
                ctl.observe(*last)
            kc = ctl.plan(1, round_id=r, requests=[rid])
            hist[kc] = hist.get(kc, 0) + 1
            J = min(stop_point(cum, tau), kc) if kc else 0
            acc = min(m, J)
            tokens, ms, n = tokens + acc + 1, ms + costs[J], n + acc + 1
            last, r = ([J], [acc], r), r + 1
    tot = sum(hist.values())
    return tokens / ms, {k: round(100 * v / tot) for k, v in sorted(hist.items())}


if __name__ == "__main__":
    seqs = anchors(sys.argv[1])
    order = mixed_order(seqs)
    allc = [cum for _, a in seqs for _, cum in a]
    for name, costs in TABLES.items():
        rc.COSTS[:] = costs
        best = max(rc.replay(order, fixed=k) for k in range(1, 6))
        for tau in (0.5, 0.6, 0.7):
            price = [costs[0]] + [sum(costs[min(stop_point(c, tau), k)] for c in allc) / len(allc) for k in range(1, 6)]
            a, ha = replay(order, costs, tau, costs)
            b, hb = replay(order, costs, tau, price)
            print(f"{name} tau {tau}: table price {a / best:.3f} {ha} | stop-aware price {b / best:.3f} {hb}")
