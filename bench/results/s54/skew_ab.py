"""A/B of served pricing's cost checks at k = 0 (498106a): mtp_step (default) vs mtp_step_alt (the same with
_zero_cost_check off), one shared start-up table whose k >= 1 costs are multiplied by SKEW (1 = as calibrated),
mixed B=1 interleaved with plain, fixed k = 1, 2; controllers reset before each repeat (as bench/adaptive.py).
usage: skew_ab.py <checkout> SKEW REPS OUT.json [source]"""
import sys, tempfile, json
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
skew, reps, out = float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
src = sys.argv[5] if len(sys.argv) > 5 else "mixed"
import os; B = int(os.environ.get("B", "1")); NP = int(os.environ.get("NP", "4"))
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_k1,mtp_k2,mtp_step,mtp_step_alt", f"--batch_sizes={B}",
                             "--dtypes=float32", f"--sources={src}", f"--num_prompts={NP}", "--max_tokens=256",
                             "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave", "--alt_shares_table",
                             "--alt_step_policy={}"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
tables = {id(engines[n].engine.control.table): engines[n].engine.control.table for n in ("mtp_step", "mtp_step_alt")}
for t in tables.values():
    o = t.cost_ms
    object.__setattr__(t, "cost_ms", (lambda o: lambda bcap, x, kv_len=None: (None if (c := o(bcap, x, kv_len)) is None
                                                          else c * (skew if x >= 1 else 1.0)))(o))
print("tables", len(tables), {k: round(next(iter(tables.values())).cost_ms(1, k), 2) for k in range(6)}, flush=True)
res = []
names = list(bargs.configs)
for rep in range(reps):
    for n in ("mtp_step", "mtp_step_alt"):
        ctl = engines[n].engine.control
        ctl.reset()
        if n == "mtp_step_alt":
            ctl.step._zero_cost_check = lambda *a, **k: False
    order = names if rep % 2 == 0 else names[::-1]
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets[src][:NP], B, 256, True, 0.0)
    r = {n: x.tokens / x.cpu_s for n, x in runs.items()}
    best = max(r[n] for n in ("plain", "mtp_k1", "mtp_k2"))
    summ = {n: engines[n].engine.control.summary() for n in ("mtp_step", "mtp_step_alt")}
    res.append(dict(r=r, summ={n: {k: v for k, v in s.items() if k in ("chosen_k", "cost_checks", "probes", "ceiling_batches")} for n, s in summ.items()}))
    print(rep, {n: round(v, 2) for n, v in r.items()}, "step/best %.3f alt/best %.3f step/alt %.3f" % (
        r["mtp_step"] / best, r["mtp_step_alt"] / best, r["mtp_step"] / r["mtp_step_alt"]), flush=True)
    print("  ", res[-1]["summ"], flush=True)
json.dump(res, open(out, "w"))
