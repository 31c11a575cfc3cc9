"""(Needs keep_served.patch applied: AdaptiveControl.reset(keep_served=...), not on main.) A/B of a draft-step controller reset cold before every repeat (mtp_step, the bench's default) against one reset
keeping the served round-time ratios it measured on this machine (mtp_step_alt, AdaptiveControl.reset(keep_served=True)),
on one shared start-up table, interleaved with plain and fixed k = 1; repeat 0 has nothing to keep.
usage: ab_served.py <checkout> REPS OUT.json SOURCE[,SOURCE...] (env B, NP)"""
import sys, tempfile, json, os
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
reps, out, sources = int(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
B = int(os.environ.get("B", "4")); NP = int(os.environ.get("NP", str(B)))
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_k1,mtp_step,mtp_step_alt", f"--batch_sizes={B}",
                             "--dtypes=float32", f"--sources={','.join(sources)}", f"--num_prompts={NP}",
                             "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave",
                             "--alt_shares_table", '--alt_step_policy={}'])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
t = engines["mtp_step"].engine.control.table
assert t is engines["mtp_step_alt"].engine.control.table
print("table", {b: {k: round(t.cost_ms(b, k), 2) for k in range(3)} for b in (1, 2, 4, 8) if t.cost_ms(b, 0)}, flush=True)
res, names = [], list(bargs.configs)
for src in sources:
    engines["mtp_step_alt"].engine.control.reset()  # a new source starts from nothing kept
    for rep in range(reps):
        engines["mtp_step"].engine.control.reset()
        engines["mtp_step_alt"].engine.control.reset(keep_served=True)
        kept = {b: engines["mtp_step_alt"].engine.control.step.served.ratio(b) for b in range(1, B + 1)}
        order = names if rep % 2 == 0 else names[::-1]
        runs = il.serve_interleaved({n: engines[n] for n in order}, sets[src][:NP], B, 256, True, 0.0)
        r = {n: x.tokens / x.cpu_s for n, x in runs.items()}
        best = max(r["plain"], r["mtp_k1"])
        summ = {n: {k: v for k, v in engines[n].engine.control.summary().items() if k in ("chosen_k", "cost_checks", "probes")}
                for n in ("mtp_step", "mtp_step_alt")}
        res.append(dict(src=src, rep=rep, r=r, summ=summ, kept=kept))
        print(src, rep, {n: round(v, 2) for n, v in r.items()}, "step/plain %.3f alt/plain %.3f alt/step %.3f step/best %.3f alt/best %.3f" % (
            r["mtp_step"] / r["plain"], r["mtp_step_alt"] / r["plain"], r["mtp_step_alt"] / r["mtp_step"],
            r["mtp_step"] / best, r["mtp_step_alt"] / best), summ,
            "kept", {b: (round(x, 3) if x else None) for b, x in kept.items()}, flush=True)
json.dump(res, open(out, "w"))
