"""Time the engine's DraftStepController alone over the replay's rounds (B = 1, stop 0.6): us per plan+observe, and a
digest of the chosen k sequence (a speed-up of the controller must leave it unchanged).

    python bench/results/s45/ctl_prof.py <held-out dir> [prof]
"""
import sys, time, cProfile, pstats
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy
from stop_aware import TABLES, anchors, mixed_order, stop_point
order = mixed_order(anchors(sys.argv[1]))
costs = TABLES["zen5a"]

def run():
    ctl = DraftStepController(5, StepPolicy(), lambda b, k: costs[k], lambda b: 1, lag=1, buckets=[1])
    r, last, n_rounds, t_ctl = 0, None, 0, 0.0
    ks = []
    for rid, (_, anch) in enumerate(order):
        n = 0
        while n < len(anch):
            m, cum = anch[n]
            t0 = time.perf_counter()
            if last:
                ctl.observe(*last)
            kc = ctl.plan(1, round_id=r, kv_len=100 + n, can_verify=True, requests=[rid], closed=None)
            t_ctl += time.perf_counter() - t0
            J = min(stop_point(cum, 0.6), kc) if kc else 0
            ks.append(kc)
            acc = min(m, J)
            n += acc + 1
            last, r = ([J], [acc], r), r + 1
    return r, t_ctl, ks

import hashlib
rounds, t, ks = run()
print("k sequence md5", hashlib.md5(str(ks).encode()).hexdigest())
print(f"{rounds} rounds, {1e6 * t / rounds:.1f} us per round (plan + observe)")
if len(sys.argv) > 2:
    cProfile.run("run()", "/tmp/ctl.prof")
    pstats.Stats("/tmp/ctl.prof").sort_stats("tottime").print_stats(18)
