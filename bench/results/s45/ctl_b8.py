"""The draft step's controller alone at B = 8 in its plain floor (k = 0 nearly always, probes measured at a low rate,
a closed batch of 8 requests with 256 tokens each): us per plan + observe, and a digest of the chosen k sequence.

    python bench/results/s45/ctl_b8.py [prof]
"""
import cProfile, hashlib, pstats, random, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy

COSTS = {1: [19.2, 18.5, 22.5, 31.9], 4: [21.8, 34.0, 47.2, 66.9], 8: [35.0, 69.9, 97.1, 114.2]}  # stop 45 table


def run():
    rng = random.Random(0)
    ctl = DraftStepController(3, StepPolicy(), lambda b, k: COSTS[b][k], lambda b: 1 if b == 1 else 4 if b <= 4 else 8,
                              lag=1, buckets=[1, 4, 8])
    ids = list(range(8)); left = [256] * 8; ks, t_ctl, last = [], 0.0, None
    for r in range(1024):
        t0 = time.perf_counter()
        if last:
            ctl.observe(*last)
        k = ctl.plan(8, round_id=r, kv_len=200 + r, can_verify=True, requests=ids,
                     closed=[(max(0, n), 1.0) for n in left])
        t_ctl += time.perf_counter() - t0
        ks.append(k)
        acc = [min(k, sum(rng.random() < 0.4 for _ in range(1))) if k else 0 for _ in ids]
        last = ([k] * 8, acc, r)
        left = [n - 1 - a for n, a in zip(left, acc)]
    return t_ctl, ks


t, ks = run()
print("k sequence md5", hashlib.md5(str(ks).encode()).hexdigest(), {k: ks.count(k) for k in set(ks)})
print(f"{1e6 * t / len(ks):.1f} us per round (plan + observe)")
if len(sys.argv) > 1:
    cProfile.run("run()", "/tmp/ctl_b8.prof")
    pstats.Stats("/tmp/ctl_b8.prof").sort_stats("tottime").print_stats(22)
