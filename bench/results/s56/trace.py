"""Decision trace of DraftStepController over randomized scenarios (for old-vs-new equality). usage: trace.py <checkout> out.txt"""
import sys, random, hashlib
sys.path.insert(0, sys.argv[1])
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy
BASE = {1: [17.74, 21.5, 25.0, 28.8, 32.5, 36.0], 2: [19.0, 26.0, 33.0, 41.0, 49.0, 55.0],
        4: [21.77, 33.4, 45.5, 61.4, 77.9, 85.3], 8: [27.0, 50.0, 72.0, 95.0, 120.0, 140.0]}
import os
LAZY = os.environ.get("LAZY") == "1"
out = open(sys.argv[2], "w")
for seed in range(int(sys.argv[3]) if len(sys.argv) > 3 else 60):
    rng = random.Random(seed)
    skew = rng.choice([0.6, 0.8, 1.0, 1.2, 2.0, 10.0])
    cost = lambda bcap, k, s=skew: BASE[bcap][k] * (s if k else 1.0) if bcap in BASE else None
    pad = lambda b: next((x for x in (1, 2, 4, 8) if x >= b), None)
    pol = StepPolicy(**rng.choice([{}, {"closed_batch": False}, {"per_request": False}, {"served_costs": False},
                                   {"population_drafts": 0}, {"ceiling_pricing": True}, {"zero_confidence": 0.0}]))
    c = DraftStepController(5, pol, cost, pad, lag=rng.choice([1, 2]), buckets=[1, 2, 4, 8],
                            covers=lambda b, kv: kv is None or kv < 2600)
    nid = 0; live = []
    rates = {}
    pending = {}
    for r in range(1, 700):
        if rng.random() < 0.03 or not live:
            while len(live) < rng.choice([1, 2, 3, 4, 5, 8]):
                nid += 1; live.append([nid, rng.randint(20, 300)]); rates[nid] = rng.choice([0.1, 0.3, 0.5, 0.8, 0.95])
        B = len(live)
        closed = [(n, 1.0) for _, n in live] if rng.random() < 0.7 else None
        k = c.plan(B, round_id=r, kv_len=100 + r * 4, can_verify=rng.random() > 0.05,
                   requests=[i for i, _ in live], closed=(lambda cl=closed: cl) if LAZY else closed)
        lens = [min(k, n) for _, n in live]
        acc = []
        for (i, _), L in zip(live, lens):
            m = 0
            while m < L and rng.random() < rates[i]:
                m += 1
            acc.append(m)
        ceil = lens if pol.ceiling_pricing else None
        c.observe(lens, acc, round_id=r, ceilings=ceil)
        c.observe_round(r, B, k, cost(pad(B), k) * rng.uniform(0.8, 1.2), rng.random() > 0.1)
        out.write(f"{seed} {r} {k} {c.last_probe} {c.last_check}\n")
        for j, (_, n) in enumerate(live):
            live[j][1] = n - 1 - acc[j]
        live = [x for x in live if x[1] > 0]
    for d in c.decisions:
        out.write(repr(d) + "\n")
    out.write(repr(c.exploration_summary()) + repr(c.cost_checks) + "\n")
out.close()
print(hashlib.md5(open(sys.argv[2], "rb").read()).hexdigest())
