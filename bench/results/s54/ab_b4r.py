"""Mixed B = 4 A/B of a step policy (mtp_step_alt with --alt_step_policy=ALT) on one shared table whose Bcap-4 k >= 1
costs are scaled so that k = 1 costs R4 x plain there (0: as calibrated). usage: ab_b4r.py <checkout> R4 ALT REPS"""
import sys, tempfile, json
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
R4, alt, reps = float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_k1,mtp_step,mtp_step_alt", "--batch_sizes=4", "--dtypes=float32",
                             "--sources=mixed", "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0",
                             "--k_max=5", "--interleave", "--alt_shares_table", f"--alt_step_policy={alt}"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
t = engines["mtp_step"].engine.control.table
assert t is engines["mtp_step_alt"].engine.control.table
if R4:
    o = t.cost_ms
    f = R4 * o(4, 0) / o(4, 1)
    object.__setattr__(t, "cost_ms", lambda bcap, x, kv_len=None: (None if (c := o(bcap, x, kv_len)) is None
                                                                     else c * (f if bcap == 4 and x >= 1 else 1.0)))
print("Bcap 4", {k: round(t.cost_ms(4, k), 2) for k in range(6)}, flush=True)
names = list(bargs.configs)
for rep in range(reps):
    for n in ("mtp_step", "mtp_step_alt"):
        engines[n].engine.control.reset()
    order = names if rep % 2 == 0 else names[::-1]
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets["mixed"][:4], 4, 256, True, 0.0)
    r = {n: x.tokens / x.cpu_s for n, x in runs.items()}
    print(rep, {n: round(v, 2) for n, v in r.items()}, "step/plain %.3f alt/plain %.3f alt/step %.3f k1/plain %.3f" % (
        r["mtp_step"] / r["plain"], r["mtp_step_alt"] / r["plain"], r["mtp_step_alt"] / r["mtp_step"], r["mtp_k1"] / r["plain"]),
        {n: engines[n].engine.control.summary()["chosen_k"] for n in ("mtp_step", "mtp_step_alt")}, flush=True)
