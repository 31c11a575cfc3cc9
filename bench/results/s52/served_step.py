"""The mtp_step engine itself serving the mixed stream with k forced to 1, 2, 0, 3 in turn, blocks of 16 rounds (its
controller plans, then is overridden; confidence stop off): per-round medians by verified rows, and their ratios, to
set next to the engine's own start-up table (printed on stderr). args: checkout"""
import sys, tempfile, statistics
from pathlib import Path
from collections import defaultdict
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=mtp_step", "--batch_sizes=1", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
eng = engines["mtp_step"].engine
n = {"r": 0}
ks = [1, 2, 0, 3]
import dataclasses
def force(ctl):
    st = ctl.step; o = st.plan
    st.policy = dataclasses.replace(st.policy, confidence_stop=0.0)
    def plan(*a, **k):
        o(*a, **k); st.last_probe = st.last_check = False
        r = ks[(n["r"] // 16) % len(ks)]; n["r"] += 1
        return r
    st.plan = plan
ctl = eng.control
reset = ctl.reset
def reset2(*a, **k):
    reset(*a, **k); force(ctl)
ctl.reset = reset2
force(ctl)
times = defaultdict(list)
orig = il._Stream.step
def step(self):
    n0 = len(self.rec.rows); w0 = self.wall
    orig(self)
    rows = self.rec.rows[n0:]
    if len(rows) == 1:
        times[rows[0]].append((self.wall - w0) * 1e3)
il._Stream.step = step
for rep in range(2):
    il.serve_interleaved({"mtp_step": engines["mtp_step"]}, sets["mixed"][:4], 1, 256, True, 0.0)
med = {r: statistics.median(v) for r, v in sorted(times.items()) if len(v) > 20}
print({r: (len(times[r]), round(m, 2)) for r, m in med.items()})
print("served c1/c0 %.3f c2/c1 %.3f c3/c2 %.3f" % (med[2] / med[1], med[3] / med[2], med[4] / med[3]))
