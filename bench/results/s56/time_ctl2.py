"""Engine-level controller time per round (control.plan, control.observe; perf_counter wrappers), mixed B closed
batch, 256 tokens, SKEW scales the table's k >= 1 costs (10: k = 0 throughout). usage: time_ctl2.py <checkout> B REPS"""
import sys, tempfile, time, os, collections, statistics
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
B = int(sys.argv[2]); REPS = int(sys.argv[3]); SKEW = float(os.environ.get("SKEW", "10"))
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_step", f"--batch_sizes={B}", "--dtypes=float32", "--sources=mixed",
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
wrap(type(ctl), "plan", "plan"); wrap(type(ctl), "observe", "observe")
out = collections.defaultdict(list)
for rep in range(REPS):
    ctl.reset(); acc.clear()
    runs = il.serve_interleaved(engines, sets["mixed"][:B], B, 256, True, 0.0)
    n = acc["plan"][0]
    for k in ("plan", "observe"):
        out[k].append(1e6 * acc[k][1] / n)
    out["ratio"].append(runs["mtp_step"].tokens / runs["mtp_step"].wall_s / (runs["plain"].tokens / runs["plain"].wall_s))
    out["share"].append((acc["plan"][1] + acc["observe"][1]) / runs["mtp_step"].wall_s)
print(sys.argv[1], "B", B, "SKEW", SKEW, ctl.summary())
for k, v in out.items():
    print(f"  {k:8s} median {statistics.median(v):8.4f}  {[round(x, 4) for x in v]}")
