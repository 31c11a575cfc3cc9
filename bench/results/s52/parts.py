"""Per-round wall ms split: engine.step total, rounds.run, drafter.draft, runner.forward (target incl logits),
control.plan, control.observe — mtp_k2 vs mtp_step (real controller), mixed B=1, interleaved."""
import sys, tempfile, time, statistics
from pathlib import Path
from collections import defaultdict
sys.path.insert(0, sys.argv[1])
reps = int(sys.argv[2]); cfgs = sys.argv[3] if len(sys.argv) > 3 else "plain,mtp_k1,mtp_k2,mtp_step"
from bench import adaptive, common, adaptive_interleaved as il
common.setup_threads(1)
bargs = adaptive.parse_args([f"--configs={cfgs}", "--batch_sizes=1", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
pc = time.perf_counter
acc = defaultdict(lambda: defaultdict(float)); cur = {"name": None}
def wrap(obj, attr, label):
    f = getattr(obj, attr)
    def g(*a, **k):
        t0 = pc(); r = f(*a, **k); acc[cur["name"]][label] += pc() - t0
        return r
    setattr(obj, attr, g)
for n in bargs.configs:
    e = engines[n].engine
    if n != "plain": wrap(e.rounds.drafter, "draft", "draft")
    wrap(e.rounds.runner, "forward", "forward")
    wrap(e.rounds.runner, "prepare", "prepare")
    wrap(e.rounds, "run", "run")
    wrap(e, "commit", "commit")
    wrap(e, "_schedule", "schedule")
    wrap(e, "_outputs", "outputs")
    if e.control is not None:
        wrap(e.control, "plan", "plan"); wrap(e.control, "observe", "observe")
orig = il._Stream.step
names = {}
def step(self):
    cur["name"] = names[id(self)]
    w0 = self.wall; orig(self); acc[cur["name"]]["step"] += self.wall - w0; acc[cur["name"]]["n"] += 1
il._Stream.step = step
oi = il._Stream.__init__
for rep in range(reps):
    order = bargs.configs if rep % 2 == 0 else bargs.configs[::-1]
    it = iter(order)
    def init(self, *a, **k):
        oi(self, *a, **k); names[id(self)] = next(it)
    il._Stream.__init__ = init
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets["mixed"][:4], 1, 256, True, 0.0)
    il._Stream.__init__ = oi
    print(rep, {n: round(x.tokens / x.wall_s, 2) for n, x in runs.items()}, flush=True)
for n in bargs.configs:
    a = acc[n]; R = a["n"]
    us = {k: round(v / R * 1e6) for k, v in a.items() if k != "n"}
    outside = us["step"] - us["run"] - us.get("plan", 0) - us.get("observe", 0) - us["commit"] - us["schedule"] - us["outputs"]
    inrun = us["run"] - us.get("draft", 0) - us["forward"] - us["prepare"]
    print(n, int(R), "rounds", us, "step-rest", outside, "run-rest", inrun)
