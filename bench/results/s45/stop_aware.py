"""Prototype (stop 45): a B = 1 draft-step controller that prices a ceiling k at the steps and rows the confidence
stop leaves (stop survival measured online, censored at the ceiling), against the engine's controller + stop."""
import pickle, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3])); sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench.results.s44.replay_conf as rc

TABLES = {"zen2": [25.59, 27.24, 30.25, 34.91, 38.05, 41.92],
          "zen5a": [18.0, 19.88, 23.25, 28.87, 30.42, 33.87],
          "zen5b": [14.46, 16.78, 20.27, 25.07, 29.03, 30.84]}


def anchors(d):
    p = Path(d) / "anchors.pkl"
    if p.exists():
        return pickle.loads(p.read_bytes())
    from bench.step_policies import held_out_anchors
    seqs = held_out_anchors(Path(d), None, 5)
    p.write_bytes(pickle.dumps(seqs))
    return seqs


def mixed_order(seqs):
    """The held-out sequences served one at a time in the mixed order (code, chat, prose, code, ...), as
    bench/results/s44/replay_conf.py serves them."""
    by = {s: [x for x in seqs if x[0] == s] for s in ("code", "chat", "prose")}
    return [by[s][i] for i in range(max(map(len, by.values()))) for s in by if i < len(by[s])]


def stop_point(cum, tau, kmax=5):
    return next((j for j in range(1, kmax + 1) if cum[j - 1] < tau), kmax)


class StopAware:
    """Sliding window of the last W rounds; per position i: verified v_i, all-accepted acc_i; per step j < ceiling:
    reached n_j, continued c_j. Prior: pseudo-counts."""

    def __init__(self, costs, kmax=5, W=20, prior=0.5, pw=1.0, interval=5, optimism=0.0):
        self.C, self.kmax, self.W, self.prior, self.pw, self.interval = costs, kmax, W, prior, pw, interval
        self.hist, self.k, self.n, self.opt = [], 1, 0, optimism

    def observe(self, k, J, a):
        self.hist.append((k, J, a)); self.hist = self.hist[-self.W:]; self.n += 1

    def score(self, k):
        if k == 0:
            return 1 / self.C[0]
        v = [0] * 6; acc = [0] * 6; n = [0] * 6; c = [0] * 6
        for (kk, J, a) in self.hist:
            for i in range(1, J + 1):
                v[i] += 1; acc[i] += a >= i
            for j in range(1, min(J, kk - 1) + 1):
                n[j] += 1; c[j] += J > j
        surv, tokens, cost, reach_prev = 1.0, 1.0, 0.0, 1.0
        cond = 1.0
        for i in range(1, k + 1):
            # Pr(J* >= i): continued past every j < i
            if i > 1:
                j = i - 1
                surv *= (c[j] + self.pw * 0.8) / (n[j] + self.pw)
            # Pr(1..i accepted | verified to i)
            ai = (acc[i] + self.pw * self.prior ** i) / (v[i] + self.pw)
            tokens += surv * ai
        # cost: distribution of min(J*, k)
        surv = 1.0; cost = 0.0
        for j in range(1, k + 1):
            if j < k:
                cont = (c[j] + self.pw * 0.8) / (n[j] + self.pw)
                cost += surv * (1 - cont) * self.C[j]
                surv *= cont
            else:
                cost += surv * self.C[k]
        return tokens / cost

    def plan(self):
        if self.n % self.interval == 0:
            s = {k: self.score(k) for k in range(self.kmax + 1)}
            best = max(s, key=lambda k: (s[k], -k))
            if (s[best] - s[self.k]) / s[self.k] > 0.05:
                self.k = best
        return self.k


def replay_aware(order, costs, tau, **kw):
    ctl = StopAware(costs, **kw)
    tokens = ms = 0.0
    for _, anch in order:
        n = 0
        while n < len(anch):
            m, cum = anch[n]
            k = ctl.plan()
            J = min(stop_point(cum, tau), k) if k else 0
            acc = min(m, J)
            tokens, ms, n = tokens + acc + 1, ms + costs[J], n + acc + 1
            ctl.observe(k, J, acc)
    return tokens / ms


if __name__ == "__main__":
    order = mixed_order(anchors(sys.argv[1]))
    for name, costs in TABLES.items():
        rc.COSTS[:] = costs
        fixed = {k: rc.replay(order, fixed=k) for k in range(1, 6)}
        best = max(fixed.values())
        row = [f"{name}"]
        for tau in (0.4, 0.5, 0.6, 0.7):
            row.append(f"tau {tau}: engine ctl {rc.replay(order, tau) / best:.3f}, aware {replay_aware(order, costs, tau) / best:.3f}, "
                       f"k5+stop {rc.replay(order, tau, fixed=5) / best:.3f}")
        print(" | ".join(row))
