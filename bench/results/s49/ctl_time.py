"""Controller time per component (perf_counter wrappers) in one bench run of the draft step engine. argv: checkout src B temp"""
import sys, tempfile, time
from collections import defaultdict
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common
src, B, temp = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=mtp_step", f"--batch_sizes={B}", "--dtypes=float32", f"--sources={src}",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", f"--temperature={temp}", "--k_max=3"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
llm = engines["mtp_step"]; ctl = llm.engine.control; step = ctl.step
tot = defaultdict(float); n = defaultdict(int)
def wrap(obj, name, label):
    f = getattr(obj, name)
    def w(*a, **k):
        t = time.perf_counter()
        try: return f(*a, **k)
        finally: tot[label] += time.perf_counter() - t; n[label] += 1
    setattr(obj, name, w)
wrap(ctl, "plan", "control.plan"); wrap(ctl, "observe", "control.observe")
for rep in range(2):
    ctl.reset(); step = ctl.step
    wrap(step, "plan", "step.plan"); wrap(step, "_rescore", "step._rescore"); wrap(step, "_served_table", "step._served_table")
    wrap(step, "_cost_check", "step._cost_check"); wrap(step, "observe", "step.observe"); wrap(step, "observe_round", "step.observe_round")
    wrap(step.window, "observe", "window.observe"); wrap(step.costs, "for_batch", "costs.for_batch"); wrap(step.costs, "bucket", "costs.bucket")
    wrap(step.window, "prefix_acceptance", "window.prefix_acceptance")
    run = common.serve(llm, sets[src][:4], B, 256, True, temp)
    print("wall", run.wall_s)
for k in sorted(tot, key=lambda k: -tot[k]):
    print(f"{k:28s} {1000*tot[k]:8.1f} ms {n[k]:6d} calls {1e6*tot[k]/n[k]:8.1f} us/call  {100*tot[k]/run.wall_s/2:.2f}%")
