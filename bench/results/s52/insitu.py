"""In-situ wall time (no profiler) of the draft step controller's pieces, mixed B=1, k2 + step interleaved."""
import sys, tempfile, time
from pathlib import Path
from collections import defaultdict
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=mtp_k2,mtp_step", "--batch_sizes=1", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
pc = time.perf_counter
tot = defaultdict(float); cnt = defaultdict(int)
def wrap(obj, attr, label=None):
    label = label or attr
    f = getattr(obj, attr)
    def g(*a, **k):
        t0 = pc(); r = f(*a, **k); tot[label] += pc() - t0; cnt[label] += 1
        return r
    setattr(obj, attr, g)
ctl = engines["mtp_step"].engine.control
def instrument():
    st = ctl.step
    for a in ("plan", "observe", "_rescore", "_best", "_served_table", "_ceiling_priced", "_cost_check", "_refresh_depth",
              "observe_round", "probe_every"):
        wrap(st, a, "step." + a)
    for a in ("observe", "prefix_acceptance"):
        wrap(st.window, a, "window." + a)
    wrap(st.feedback, "release", "fb.release"); wrap(st.feedback, "push", "fb.push")
    wrap(st.costs, "bucket", "costs.bucket"); wrap(st.costs, "for_batch", "costs.for_batch")
    for a in ("_closed_batch",):
        wrap(ctl, a, "ctl." + a)
wrap(ctl, "plan", "ctl.plan"); wrap(ctl, "observe", "ctl.observe")
r0 = ctl.reset
def reset(*a, **k):
    r0(*a, **k); instrument()
ctl.reset = reset
instrument()
for rep in range(int(sys.argv[2])):
    runs = il.serve_interleaved({n: engines[n] for n in bargs.configs}, sets["mixed"][:4], 1, 256, True, 0.0)
    print({n: round(x.tokens / x.wall_s, 2) for n, x in runs.items()}, flush=True)
R = cnt["ctl.plan"]
for k in sorted(tot, key=lambda k: -tot[k]):
    print(f"{k:28s} calls/round {cnt[k]/R:5.2f}  us/call {tot[k]/cnt[k]*1e6:7.1f}  us/round {tot[k]/R*1e6:7.1f}")
