"""Warm loop of plan + observe + observe_round at steady k = 0 (for perf stat instruction counts). usage: micro3.py <checkout> B SKEW N"""
import sys, random
sys.path.insert(0, sys.argv[1])
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy
B = int(sys.argv[2]); SKEW = float(sys.argv[3]); N = int(sys.argv[4])
T = {1: [17.74, 21.5, 25.0, 28.8, 32.5, 36.0], 2: [19.0, 26.0, 33.0, 41.0, 49.0, 55.0],
     4: [21.77, 33.4, 45.5, 61.4, 77.9, 85.3], 8: [27.0, 50.0, 72.0, 95.0, 120.0, 140.0]}
cost = lambda bcap, k: T[bcap][k] * (SKEW if k else 1.0) if bcap in T else None
pad = lambda b: next((x for x in (1, 2, 4, 8) if x >= b), None)
rng = random.Random(0)
c = DraftStepController(5, StepPolicy(), cost, pad, lag=1, buckets=[1, 2, 4, 8], covers=lambda b, kv: True)
reqs = list(range(B))
for r in range(1, N + 1):
    closed = [(100000, 1.0) for i in range(B)]
    k = c.plan(B, round_id=r, kv_len=500, can_verify=True, requests=reqs, closed=closed)
    lens = [k] * B
    acc = [min(L, sum(1 for _ in range(k) if rng.random() < 0.35)) for L in lens]
    c.observe(lens, acc, round_id=r)
    c.observe_round(r, B, k, 21.8 if k == 0 else 33.0 * SKEW, True)
