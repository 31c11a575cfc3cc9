"""A/B of served pricing's cost checks at k = 0 (mtp_step default vs mtp_step_alt, the same with its `_zero_cost_check`
replaced by one that never runs), one shared start-up table whose k >= 1 costs are multiplied by SKEW (1 = as
calibrated); interleaved with plain and fixed k = 1; controllers reset before each repeat.
usage: ab_zero.py <checkout> SKEW REPS OUT.json [source] (env B, NP)"""
import sys, tempfile, json, os
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
skew, reps, out = float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
src = sys.argv[5] if len(sys.argv) > 5 else "mixed"
B = int(os.environ.get("B", "4")); NP = int(os.environ.get("NP", str(B)))
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_k1,mtp_step,mtp_step_alt", f"--batch_sizes={B}",
                             "--dtypes=float32", f"--sources={src}", f"--num_prompts={NP}", "--max_tokens=256",
                             "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave", "--alt_shares_table",
                             '--alt_step_policy={}'])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
t = engines["mtp_step"].engine.control.table
assert t is engines["mtp_step_alt"].engine.control.table
o = t.cost_ms
object.__setattr__(t, "cost_ms", lambda bcap, x, kv_len=None: (None if (c := o(bcap, x, kv_len)) is None
                                                                 else c * (skew if x >= 1 else 1.0)))
print("table", {b: {k: round(t.cost_ms(b, k), 2) for k in range(3)} for b in (1, 2, 4, 8) if t.cost_ms(b, 0)}, flush=True)
res, names = [], list(bargs.configs)
for rep in range(reps):
    for n in ("mtp_step", "mtp_step_alt"):
        engines[n].engine.control.reset()
    engines["mtp_step_alt"].engine.control.step._zero_cost_check = lambda *a, **k: False
    order = names if rep % 2 == 0 else names[::-1]
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets[src][:NP], B, 256, True, 0.0)
    r = {n: x.tokens / x.cpu_s for n, x in runs.items()}
    best = max(r["plain"], r["mtp_k1"])
    summ = {n: {k: v for k, v in engines[n].engine.control.summary().items() if k in ("chosen_k", "cost_checks", "probes")}
            for n in ("mtp_step", "mtp_step_alt")}
    st = engines["mtp_step"].engine.control.step
    res.append(dict(r=r, summ=summ, served={b: st.served.ratio(b) for b in range(1, B + 1)}))
    print(rep, {n: round(v, 2) for n, v in r.items()}, "step/best %.3f alt/best %.3f step/alt %.3f step/plain %.3f alt/plain %.3f" % (
        r["mtp_step"] / best, r["mtp_step_alt"] / best, r["mtp_step"] / r["mtp_step_alt"], r["mtp_step"] / r["plain"],
        r["mtp_step_alt"] / r["plain"]), summ, {b: (round(x, 3) if x else None) for b, x in res[-1]["served"].items()}, flush=True)
json.dump(res, open(out, "w"))
