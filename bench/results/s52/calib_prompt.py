"""Calibration rounds (measure(), k = 0..5, Bcap 1) on random-token prompts (the product's) against the same on a real
prompt of the mixed stream, alternating, same process: per run the per-point medians, increments, and the acceptance
the synthetic rounds saw."""
import sys, tempfile, statistics
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common
from adaspec.engine import calibration_loads as cl
from adaspec.engine.calibrate import measure, steps_plan
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=mtp_step", "--batch_sizes=1", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
eng = engines["mtp_step"].engine
eff = eng.control.effective
sets = common.warmed_prompt_sets(engines, bargs)
real = list(sets["mixed"][1].ids)
orig = cl._random_prompt
acc = {"L": 0, "m": 0}
ro = eng.rounds.run
def run(chunks, plan):
    r = ro(chunks, plan); acc["L"] += sum(r.verify_lens); acc["m"] += sum(r.num_accepted); return r
eng.rounds.run = run
for rep in range(3):
    for kind in ("random", "real"):
        cl._random_prompt = orig if kind == "random" else (lambda e, n, g: (real * 4)[:n])
        acc.update(L=0, m=0)
        m = measure(eng, {1: [0, 1, 2, 3, 4, 5]}, steps_plan, eff.context_tuples(), eff.warmup_steps, eff.window_steps,
                    eff.windows_per_point, eff.token_seed, lambda b, k: k + 1)
        by = {}
        for p in m.points:
            by.setdefault(p.x, []).append(p.cost_s * 1e3)
        med = {k: statistics.median(v) for k, v in sorted(by.items())}
        print(kind, {k: round(v, 2) for k, v in med.items()}, "c2/c1 %.3f c1/c0 %.3f" % (med[2] / med[1], med[1] / med[0]),
              "accepted/verified %.2f" % (acc["m"] / max(1, acc["L"])), flush=True)
