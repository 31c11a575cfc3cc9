"""Does the calibration's k = 1 come out cheap relative to k = 2 whatever the order? measure() on the bench's mtp_step
engine with several point orders; per order the per-point medians (ms)."""
import sys, tempfile, statistics
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common
from adaspec.engine.calibrate import measure, steps_plan
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=mtp_step", "--batch_sizes=1", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
eng = engines["mtp_step"].engine
eff = eng.control.effective
orders = [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [2, 1, 0, 3, 5, 4], [1, 2, 1, 2, 1, 2], [0, 1, 2, 3, 4, 5]]
for order in orders * 2:
    m = measure(eng, {1: order}, steps_plan, eff.context_tuples(), eff.warmup_steps, eff.window_steps,
                eff.windows_per_point, eff.token_seed, lambda b, k: k + 1)
    by = {}
    for p in m.points:
        by.setdefault(p.x, []).append(p.cost_s * 1e3)
    med = {k: statistics.median(v) for k, v in sorted(by.items())}
    inc = {k: round(med[k] - med[k - 1], 2) for k in med if k - 1 in med}
    print(order, {k: round(v, 2) for k, v in med.items()}, "increments", inc, flush=True)
