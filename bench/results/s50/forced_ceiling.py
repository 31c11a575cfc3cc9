"""Interleaved mixed B=1 k_max 5: plain, k2, draft step, and the draft step forced to ceiling K (alt engine)."""
import sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
K, reps = int(sys.argv[2]), int(sys.argv[3])
common.setup_threads(1)
cfgs = "plain,mtp_k2,mtp_step,mtp_step_alt"
bargs = adaptive.parse_args([f"--configs={cfgs}", "--batch_sizes=1", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
ctl = engines["mtp_step_alt"].engine.control
def force(ctl):
    st = ctl.step; o = st.plan
    def plan(*a, **k):
        o(*a, **k); st.last_probe = st.last_check = False
        return K
    st.plan = plan
reset = ctl.reset
def reset2(*a, **k):
    reset(*a, **k); force(ctl)
ctl.reset = reset2
force(ctl)
names = bargs.configs
for rep in range(reps):
    order = names if rep % 2 == 0 else names[::-1]
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets["mixed"][:4], 1, 256, True, 0.0)
    r = {n: x.tokens / x.wall_s for n, x in runs.items()}
    best = max(r["plain"], r["mtp_k2"])
    print(rep, {n: round(v, 1) for n, v in r.items()}, "step/best", round(r["mtp_step"] / best, 4),
          f"forced{K}/best", round(r["mtp_step_alt"] / best, 4), "acc", runs["mtp_step"].stats["mean_acceptance_length"],
          runs["mtp_step_alt"].stats["mean_acceptance_length"], flush=True)
