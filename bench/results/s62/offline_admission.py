"""Stop 62: offline study of sync admission rules on recorded rounds (record_rounds.py): each rule picks a verify
length L from the round's P (and what earlier rounds showed), the round then commits 1 + min(m, L) tokens and costs
the table's drafted round of 1 + L rows (or a plain round when it skips the draft). Throughput relative to plain.

    python bench/results/s62/offline_admission.py rounds.json
"""
import json
import sys

import numpy as np

d = json.loads(open(sys.argv[1]).read())
plain = d["plain"]
cost = {int(k): v for k, v in d["costs"].items()}
if len(sys.argv) > 2:  # override: "plain,c2,c3,...,c8"
    xs = [float(x) for x in sys.argv[2].split(",")]
    plain, cost = xs[0], {G: xs[G - 1] for G in range(2, 9)}


def run(rounds, rule):
    toks = ms = 0.0
    state = {}
    for P, m, cap in rounds:
        L = rule(np.array(P), state)
        if cap is not None:
            L = min(L, cap) if L is not None else None
        if L is None:
            toks, ms = toks + 1, ms + plain
            continue
        a = min(m, L)
        toks, ms = toks + 1 + a, ms + cost[1 + L]
        state.setdefault("hist", []).append((P, L, a))
    return toks / ms * plain


def fixed(L):
    return lambda P, s: L


def early_stop(P, r=1.0, value=1.0):
    P = np.minimum(1.0, r * np.minimum.accumulate(P))
    tau, L = 1.0, 0
    best = 1.0 / cost[1] if 1 in cost else 0.0
    for j in range(len(P)):
        th = (tau + value * P[j]) / cost[j + 2]
        if th < best:
            break
        best, tau, L = th, tau + value * P[j], j + 1
    return L, best


def sync_rule(r=1.0, floor=True):
    def rule(P, s):
        L, best = early_stop(P, r)
        if floor and (L == 0 or best <= 1.0 / plain):
            return None
        return L
    return rule


def ratio_rule(floor=True, window=64, prior=4.0):
    def rule(P, s):
        hist = s.get("hist", [])[-window:]
        pred = sum(float(np.minimum.accumulate(h[0])[:h[1]].sum()) for h in hist)
        real = sum(h[2] for h in hist)
        r = min(2.0, max(0.5, (real + prior) / (pred + prior)))
        r = round(20 * r) / 20
        L, best = early_stop(P, r)
        if floor and (L == 0 or best <= 1.0 / plain):
            return None
        return L
    return rule


for src, rounds in d["streams"].items():
    P = np.array([r[0] for r in rounds])
    m = np.array([r[1] for r in rounds])
    Pm = np.minimum.accumulate(P, axis=1)
    # calibration per position: predicted conditional vs realised conditional among rounds reaching j
    cal = []
    for j in range(7):
        reach = m >= j
        pred = (Pm[reach, j] / (Pm[reach, j - 1] if j else 1.0)).mean() if reach.any() else float("nan")
        real = (m[reach] > j).mean() if reach.any() else float("nan")
        cal.append(f"{j + 1}:{pred:.2f}/{real:.2f}({reach.sum()})")
    print(f"\n{src}: {len(rounds)} rounds, mean m {m.mean():.2f}; conditional predicted/realised (n): {' '.join(cal)}")
    print(f"  mean path P: {' '.join(f'{x:.2f}' for x in Pm.mean(0))}; survival: "
          f"{' '.join(f'{(m > j).mean():.2f}' for j in range(7))}")
    res = {f"L{L}": run(rounds, fixed(L)) for L in range(1, 8)}
    res["orac"] = sum(1 + x for x in m) / sum(cost[1 + x] if x else plain for x in m) * plain
    for r in (0.5, 0.75, 1.0, 1.5, 2.0):
        res[f"sync r{r}"] = run(rounds, sync_rule(r))
    res["sync ratio"] = run(rounds, ratio_rule())
    print("  " + "  ".join(f"{k} {v:.3f}" for k, v in res.items()))


# ---- gates: the draft-or-not decision before the round's P exists ----
def gated(gate, r=1.0, g1=None):
    c1 = g1 if g1 is not None else cost[2] - (cost[3] - cost[2])  # a drafted round that admits nothing

    def go(rounds):
        toks = ms = 0.0
        hist, Ls = [], []
        for P, m, cap in rounds:
            if not gate(hist):
                toks, ms = toks + 1, ms + plain
                Ls.append(None)
                continue
            L, best = early_stop(np.array(P), r)
            hist.append(best)
            a = min(m, L)
            toks, ms = toks + 1 + a, ms + (cost[1 + L] if L else c1)
            Ls.append(L)
        return toks / ms * plain, Ls
    return go


def window(n):
    return lambda h: not h or np.mean(h[-n:]) > 1.0 / plain


for src, rounds in d["streams"].items():
    out = []
    for name, gate in (("always", lambda h: True), ("lag1", window(1)), ("win16", window(16))):
        x, Ls = gated(gate)(rounds)
        pl = sum(L is None for L in Ls) / len(Ls)
        z = sum(L == 0 for L in Ls) / len(Ls)
        out.append(f"{name} {x:.3f} (plain {pl:.0%}, G1 {z:.0%})")
    print(src, " | ".join(out))
