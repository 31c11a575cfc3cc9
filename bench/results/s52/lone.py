"""Per-round median ms (by verified rows) of plain, fixed k=1, k=2 served alone (one engine at a time, ABC CBA) vs
interleaved (one round each in turn), mixed B=1, same process; plus the mtp_step engine's calibration table."""
import sys, tempfile, time, statistics
from pathlib import Path
from collections import defaultdict
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
common.setup_threads(1)
cfgs = ["plain", "mtp_k1", "mtp_k2"]
bargs = adaptive.parse_args(["--configs=plain,mtp_k1,mtp_k2", "--batch_sizes=1", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
times = {m: defaultdict(lambda: defaultdict(list)) for m in ("lone", "inter")}
mode = {"m": None}
orig = il._Stream.step
def step(self):
    n0 = len(self.rec.rows); w0 = self.wall
    orig(self)
    rows = self.rec.rows[n0:]
    if len(rows) == 1:
        times[mode["m"]][self.name][rows[0]].append((self.wall - w0) * 1e3)
il._Stream.step = step
oi = il._Stream.__init__
def run(order):
    it = iter(order)
    def init(s, *a, **k):
        oi(s, *a, **k); s.name = next(it)
    il._Stream.__init__ = init
    r = il.serve_interleaved({n: engines[n] for n in order}, sets["mixed"][:4], 1, 256, True, 0.0)
    il._Stream.__init__ = oi
    return {n: round(x.tokens / x.wall_s, 1) for n, x in r.items()}
for rep in range(2):
    mode["m"] = "lone"
    for n in (cfgs if rep % 2 == 0 else cfgs[::-1]):
        print("lone", run([n]), flush=True)
    mode["m"] = "inter"
    print("inter", run(cfgs if rep % 2 == 0 else cfgs[::-1]), flush=True)
for m in times:
    print(m, {n: {r: (len(v), round(statistics.median(v), 2)) for r, v in sorted(d.items()) if len(v) > 20} for n, d in times[m].items()})
