"""Interleaved: plain, k1, the step engine forced to k = 1 (plan_transform): the step engine's per-round overhead."""
import sys, tempfile, time, statistics
from collections import defaultdict
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
from adaspec.rounds import RoundPlan
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_k1,mtp_step", "--batch_sizes=1", "--dtypes=float32", "--sources=code",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0.8", "--k_max=3", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
eng = engines["mtp_step"].engine
def force(ctl):
    st = ctl.step; o = st.plan
    def plan(*a, **k):
        o(*a, **k); st.last_probe = st.last_check = False
        return 1
    st.plan = plan
ctl = eng.control
reset = ctl.reset
def reset2(*a, **k):
    reset(*a, **k); force(ctl)
ctl.reset = reset2
force(ctl)
per = defaultdict(list)
orig = il._Stream.step
def step(self):
    n0 = len(self.rec.rows); t = time.perf_counter(); orig(self); dt = time.perf_counter() - t
    if len(self.rec.rows) > n0: per[(self.name, self.rec.rows[-1])].append(dt)
il._Stream.step = step
for rep in range(int(sys.argv[2])):
    order = bargs.configs if rep % 2 == 0 else bargs.configs[::-1]
    names = iter(order); oi = il._Stream.__init__
    def init(self, *a, _o=oi, **k):
        _o(self, *a, **k); self.name = next(names)
    il._Stream.__init__ = init
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets["code"][:4], 1, 256, True, 0.8)
    il._Stream.__init__ = oi
    r = {n: x.tokens / x.wall_s for n, x in runs.items()}
    print(rep, {n: round(v, 1) for n, v in r.items()}, "step/k1", round(r["mtp_step"] / r["mtp_k1"], 4), runs["mtp_step"].stats["mean_acceptance_length"], flush=True)
for key in sorted(per, key=str):
    v = per[key]
    if len(v) > 5: print(key, len(v), f"median {1000*statistics.median(v):.3f}  mean {1000*statistics.mean(v):.3f}")
