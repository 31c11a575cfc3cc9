"""Per-round wall ms by verified rows: plain, fixed k=1..3, and the draft step forced to ceiling K (mixed B=1)."""
import sys, tempfile, time, statistics, json
from pathlib import Path
from collections import defaultdict
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
K, reps = int(sys.argv[2]), int(sys.argv[3])
common.setup_threads(1)
cfgs = "mtp_k1,mtp_k2,mtp_k3,mtp_step"
bargs = adaptive.parse_args([f"--configs={cfgs}", "--batch_sizes=1", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
ctl = engines["mtp_step"].engine.control
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
times = defaultdict(lambda: defaultdict(list))
parts = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
import time as _t
cur = {}
def wrap(obj, attr, label):
    f = getattr(obj, attr)
    def g(*a, **k):
        t0 = _t.perf_counter(); r = f(*a, **k); cur[label] = cur.get(label, 0.0) + (_t.perf_counter() - t0) * 1e3
        return r
    setattr(obj, attr, g)
seen = set()
for n in cfgs.split(","):
    e = engines[n].engine
    wrap(e.drafter, "draft", "draft")
    if id(e.model) not in seen:
        seen.add(id(e.model))
        wrap(e.model, "forward", "target")
        wrap(e.model, "logits", "logits")
wrap(engines["mtp_step"].engine.control, "plan", "ctl.plan")
wrap(engines["mtp_step"].engine.control, "observe", "ctl.observe")
for n in cfgs.split(","):
    e = engines[n].engine
    wrap(e.rounds, "run", "rounds.run")
    wrap(e, "commit", "commit")
    wrap(e, "_schedule", "schedule")
    wrap(e, "_outputs", "outputs")
orig_step = il._Stream.step
def step(self):
    n0 = len(self.rec.rows); w0 = self.wall
    cur.clear()
    orig_step(self)
    rows = self.rec.rows[n0:]
    key = rows[-1] if len(rows) == 1 else ("pf" if not rows else "multi")
    times[self.name][key].append((self.wall - w0) * 1e3)
    for lab, v in cur.items():
        parts[self.name][key][lab].append(v)
il._Stream.step = step
names = bargs.configs
import statistics as _s
for rep in range(reps):
    order = names if rep % 2 == 0 else names[::-1]
    llms = {n: engines[n] for n in order}
    orig_init = il._Stream.__init__
    runs = None
    streams_names = iter(order)
    def init(self, *a, **k):
        orig_init(self, *a, **k); self.name = next(streams_names)
    il._Stream.__init__ = init
    runs = il.serve_interleaved(llms, sets["mixed"][:4], 1, 256, True, 0.0)
    il._Stream.__init__ = orig_init
    r = {n: x.tokens / x.wall_s for n, x in runs.items()}
    print(rep, {n: round(v, 1) for n, v in r.items()}, 
          {n: round(x.stats["mean_acceptance_length"], 3) for n, x in runs.items() if n != "plain"}, flush=True)
for n in names:
    print(n, {k: (len(v), round(statistics.median(v), 2), round(sum(v) / len(v), 2)) for k, v in sorted(times[n].items(), key=str)})

for n in names:
    for key in sorted(parts[n], key=str):
        if key == "pf": continue
        print(n, key, len(times[n][key]), "total %.2f" % _s.mean(times[n][key]), {lab: round(_s.mean(v), 2) for lab, v in parts[n][key].items()})
