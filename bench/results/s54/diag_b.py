"""Per round at batch B: the draft step's rounds by kind (plain, k >= 1 steady, k >= 1 right after plain (catch-up),
probe, cost check) with their ms and tokens, next to plain's and fixed k = 1's rounds; interleaved.
usage: diag_b.py <checkout> B REPS OUT.json [source] [num_prompts]"""
import sys, tempfile, json, collections, statistics as st
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
B, reps, out = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
src = sys.argv[5] if len(sys.argv) > 5 else "mixed"
nprompts = int(sys.argv[6]) if len(sys.argv) > 6 else 4
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_k1,mtp_step", f"--batch_sizes={B}", "--dtypes=float32",
                             f"--sources={src}", f"--num_prompts={nprompts}", "--max_tokens=256", "--ignore_eos",
                             "--temperature=0", "--k_max=5", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
log = collections.defaultdict(list)
def observer(name):
    def f(ev):
        p = ev.plan
        log[name].append(dict(rid=ev.plan.round_id, B=len(ev.decoding), dec=len(ev.decoding) == len(ev.batch.chunks),
                              k=p.num_steps, probe=p.probe, check=p.cost_check, vl=list(ev.result.verify_lens),
                              acc=list(ev.result.num_accepted), ms=1e3 * (ev.finished - ev.started)))
    return f
for name, llm in engines.items():
    llm.engine.round_observers.append(observer(name))
names = list(bargs.configs)
for rep in range(reps):
    engines["mtp_step"].engine.control.reset()
    for n in names: log[n].append({"rep": rep})
    order = names if rep % 2 == 0 else names[::-1]
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets[src][:nprompts], B, 256, True, 0.0)
    r = {n: x.tokens / x.cpu_s for n, x in runs.items()}
    print(rep, {n: round(v, 2) for n, v in r.items()}, "step/plain %.3f k1/plain %.3f" % (r["mtp_step"] / r["plain"], r["mtp_k1"] / r["plain"]),
          engines["mtp_step"].engine.control.summary(), flush=True)
json.dump(log, open(out, "w"))
