"""Interleaved A/B on one table: the draft step as is vs the same with every k >= 1 snapped to the ceiling K (the
confidence stop decides the depth). args: checkout K reps source temperature [B FIXED [ALT_POLICY]]; environment
SNAP=all (every k >= 1, stop 51's), deep (only k >= 2) or b1 (every k >= 1, at batch size 1 only)"""
import sys, tempfile, statistics
from pathlib import Path
from collections import Counter
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
K, reps, source, T = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
MODE = __import__("os").environ.get("SNAP", "all")
B = int(sys.argv[6]) if len(sys.argv) > 6 else 1
common.setup_threads(1)
fixed = sys.argv[7] if len(sys.argv) > 7 else ("plain,mtp_k1,mtp_k2" if source == "mixed" else "plain,mtp_k1")
cfgs = fixed + ",mtp_step,mtp_step_alt"
bargs = adaptive.parse_args([f"--configs={cfgs}", f"--batch_sizes={B}", "--dtypes=float32", f"--sources={source}",
                             f"--num_prompts={max(4, 2 * B)}", "--max_tokens=256", "--ignore_eos", f"--temperature={T}", f"--k_max={K}",
                             "--interleave"] + ([f"--alt_step_policy={sys.argv[8]}"] if len(sys.argv) > 8 else []))
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
engines["mtp_step_alt"].engine.control.install_table(engines["mtp_step"].engine.control.table)
sets = common.warmed_prompt_sets(engines, bargs)
ctl = engines["mtp_step_alt"].engine.control
hist = Counter()
def snap(ctl):
    st = ctl.step; o = st.plan
    def plan(*a, **k):
        r = o(*a, **k); lo = 2 if MODE == "deep" else 1
        r2 = K if r >= lo else r
        if MODE == "b1" and a[0] != 1: r2 = r
        hist[(r, r2)] += 1
        return r2
    st.plan = plan
reset = ctl.reset
def reset2(*a, **k):
    reset(*a, **k); snap(ctl)
ctl.reset = reset2
snap(ctl)
names = bargs.configs
fx = fixed.split(",")
out = []
for rep in range(reps):
    order = names if rep % 2 == 0 else names[::-1]
    for e in ("mtp_step", "mtp_step_alt"):
        engines[e].engine.control.reset()
    hist.clear()
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets[source][:max(4, 2 * B)], B, 256, True, T)
    r = {n: x.tokens / x.wall_s for n, x in runs.items()}
    best = max(r[n] for n in fx)
    out.append((r["mtp_step"] / best, r["mtp_step_alt"] / best, r["mtp_step_alt"] / r["mtp_step"]))
    print(rep, {n: round(v, 1) for n, v in r.items()}, "step/best %.4f snap/best %.4f snap/step %.4f" % out[-1],
          "acc", {n: round(runs[n].stats["mean_acceptance_length"], 3) for n in ("mtp_step", "mtp_step_alt")},
          "planned->run", dict(sorted(Counter({a: c for (a, b), c in hist.items()}).items())), flush=True)
print("median step/best %.4f snap/best %.4f snap/step %.4f" % tuple(statistics.median(x[i] for x in out) for i in range(3)))
