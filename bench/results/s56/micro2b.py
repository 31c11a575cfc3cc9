"""Per-call durations (cold caches) of plan at re-score rounds and at others, and observe+observe_round. usage: micro2.py <checkout> B SKEW"""
import sys, time, random, statistics
sys.path.insert(0, sys.argv[1])
import numpy as np
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy
B = int(sys.argv[2]); SKEW = float(sys.argv[3]); N = 1500; import os; COLD = os.environ.get("COLD", "1") == "1"
T = {1: [17.74, 21.5, 25.0, 28.8, 32.5, 36.0], 2: [19.0, 26.0, 33.0, 41.0, 49.0, 55.0],
     4: [21.77, 33.4, 45.5, 61.4, 77.9, 85.3], 8: [27.0, 50.0, 72.0, 95.0, 120.0, 140.0]}
cost = lambda bcap, k: T[bcap][k] * (SKEW if k else 1.0) if bcap in T else None
pad = lambda b: next((x for x in (1, 2, 4, 8) if x >= b), None)
BIG = np.random.rand(3000, 3000).astype(np.float32); V = np.random.rand(3000, 4).astype(np.float32)
rng = random.Random(0)
c = DraftStepController(5, StepPolicy(), cost, pad, lag=1, buckets=[1, 2, 4, 8], covers=lambda b, kv: True)
reqs = list(range(B)); res, other, obs = [], [], []
for r in range(1, N + 1):
    if COLD: BIG @ V
    closed = [(100000, 1.0) for i in range(B)]
    n = len(c.decisions)
    t0 = time.perf_counter()
    k = c.plan(B, round_id=r, kv_len=500, can_verify=True, requests=reqs, closed=closed)
    t1 = time.perf_counter()
    (res if len(c.decisions) > n else other).append(t1 - t0)
    lens = [k] * B
    acc = [min(L, sum(1 for _ in range(k) if rng.random() < 0.35)) for L in lens]
    if COLD: BIG @ V
    t0 = time.perf_counter()
    c.observe(lens, acc, round_id=r)
    c.observe_round(r, B, k, 21.8 if k == 0 else 33.0 * SKEW, True)
    obs.append(time.perf_counter() - t0)
m = lambda x: round(1e6 * statistics.median(x), 1)
print(f"rescore plan {m(res)} us (n {len(res)}), other plan {m(other)} us (n {len(other)}), observe {m(obs)} us; "
      f"per round {round(m(res) * len(res) / N + m(other) * len(other) / N + m(obs), 1)}")
