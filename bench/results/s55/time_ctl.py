"""Wall time per call of the draft step controller's parts (perf_counter wrappers, no profiler), mixed B closed batch;
SKEW scales the table's k >= 1 costs (10: k = 0 throughout). usage: time_ctl.py <checkout> B"""
import sys, tempfile, time, os, collections
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
B = int(sys.argv[2]); SKEW = float(os.environ.get("SKEW", "1"))
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=mtp_step", f"--batch_sizes={B}", "--dtypes=float32", "--sources=mixed",
                             f"--num_prompts={B}", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
ctl = engines["mtp_step"].engine.control
t = ctl.table; o = t.cost_ms
object.__setattr__(t, "cost_ms", lambda bcap, x, kv_len=None: (None if (c := o(bcap, x, kv_len)) is None else c * (SKEW if x >= 1 else 1.0)))
acc = collections.defaultdict(lambda: [0, 0.0])
def wrap(owner, name, label):
    f = getattr(owner, name)
    def g(*a, **k):
        t0 = time.perf_counter(); r = f(*a, **k); x = acc[label]; x[0] += 1; x[1] += time.perf_counter() - t0; return r
    setattr(owner, name, g)
from adaspec.adaptive.step_controller import DraftStepController as C
from adaspec.engine import control as ctrlmod
for name in ("plan", "observe", "observe_round", "_rescore", "_leave_zero", "_served_table", "_zero_cost_check",
             "_cost_check", "probe_every", "_best", "_closed_by_depth", "_refresh_depth", "_ceiling_priced"):
    wrap(C, name, "step." + name)
for name in ("plan", "observe", "_closed_batch"):
    wrap(type(ctl), name, "control." + name)
from adaspec.adaptive import feedback
for name in ("observe", "release", "push"):
    pass
wrap(feedback.AcceptanceWindow, "observe", "window.observe")
wrap(feedback.AcceptanceWindow, "prefix_acceptance", "window.prefix_acceptance")
wrap(feedback.AcceptanceWindow, "aged_prefix_acceptance", "window.aged_prefix_acceptance")
for rep in range(2):
    ctl.reset(); acc.clear()
    t0 = time.process_time()
    runs = il.serve_interleaved(engines, sets["mixed"][:B], B, 256, True, 0.0)
    total = time.process_time() - t0
rounds = acc["control.plan"][0]
print("cpu s", round(total, 3), "rounds", rounds, ctl.summary())
for k, (n, s) in sorted(acc.items(), key=lambda x: -x[1][1]):
    print(f"{k:34s} calls {n:6d}  {1e6 * s / max(n, 1):8.1f} us/call  {1e6 * s / rounds:8.1f} us/round  {100 * s / total:5.2f}%")
