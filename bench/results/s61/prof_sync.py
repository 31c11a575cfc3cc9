"""Stop 61: cProfile of DSpark w = 7 sync verify's controller calls only (plan, observe, admit) over one run of four
held-out prompts at B = 1. `prof_sync_code_before.txt`: at 67a37c3 (CHECKOUT=a worktree of it), `..._after.txt`: at
6072d7a. Each start-up calibrates its own table, so the two runs' decisions differ.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s61/prof_sync.py code
"""
import cProfile
import os
import pstats
import sys
from pathlib import Path

sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common  # noqa: E402
from bench.adaptive_calibration import dspark_sync_b1  # noqa: E402

common.setup_threads(1)
src = sys.argv[1] if len(sys.argv) > 1 else "code"
d, ns = dspark_sync_b1([src])
sets = common.warmed_prompt_sets({"d": d}, ns)
ctl = d.engine.control
ctl.reset()
pr = cProfile.Profile()


def profiled(f):
    def call(*a, **k):
        pr.enable()
        try:
            return f(*a, **k)
        finally:
            pr.disable()
    return call


ctl.plan, ctl.observe = profiled(ctl.plan), profiled(ctl.observe)
ctl.verify.admit = profiled(ctl.verify.admit)  # the round runner calls the controller's admit
r = common.serve(d, sets[src][:4], 1, 256, ignore_eos=True)
print(f"{r.tokens / r.cpu_s:.1f} tok/s, cpu {r.cpu_s:.2f} s", ctl.summary())
st = pstats.Stats(pr)
st.sort_stats("cumulative").print_stats(35)
st.sort_stats("tottime").print_stats(25)
