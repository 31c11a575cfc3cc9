"""Interleaved A/B of a draft-step policy change on ONE start-up table: mtp_step (default policy) against
mtp_step_alt (the default policy with ALT's fields), the alt engine priced by mtp_step's table.
argv: checkout reps source B k_max temperature ALT_JSON [configs]"""
import sys, tempfile, json, dataclasses, os
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
from adaspec.adaptive.step_policy import StepPolicy
reps, src, B, kmax, temp, alt = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), json.loads(sys.argv[7])
cfgs = sys.argv[8] if len(sys.argv) > 8 else "plain,mtp_k1,mtp_k2,mtp_step,mtp_step_alt"
common.setup_threads(1)
bargs = adaptive.parse_args([f"--configs={cfgs}", f"--batch_sizes={B}", "--dtypes=float32", f"--sources={src}",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", f"--temperature={temp}", f"--k_max={kmax}", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
main, other = engines["mtp_step"].engine.control, engines["mtp_step_alt"].engine.control
other.table = main.table
reset = other.reset
def reset2(*a, **k):
    reset(*a, **k); other.step.policy = dataclasses.replace(other.step.policy, **alt)
    if os.environ.get("NOSTRETCH"): other.step._stretch = lambda *a: None
other.reset = reset2
other.reset()
names = bargs.configs
for rep in range(reps):
    order = names if rep % 2 == 0 else names[::-1]
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets[src][:4], B, 256, True, temp)
    r = {n: x.tokens / x.wall_s for n, x in runs.items()}
    best = max(v for n, v in r.items() if not n.startswith("mtp_step"))
    print(rep, {n: round(v, 1) for n, v in r.items()}, "step/best", round(r["mtp_step"] / best, 4),
          "alt/best", round(r["mtp_step_alt"] / best, 4), "alt/step", round(r["mtp_step_alt"] / r["mtp_step"], 4),
          "chosen", main.summary()["chosen_k"], other.summary()["chosen_k"], flush=True)
