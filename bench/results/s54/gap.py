"""Per round: in-round ms (rounds.run) and whole step() CPU ms, by engine and depth; mixed B=1 interleaved.
Engines: plain, fixed k1/k2/k3, the draft step (default), the same forced to ceiling 5 (alt)."""
import sys, tempfile, time, json, collections, statistics as st
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
reps, out = int(sys.argv[2]), sys.argv[3]
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_k1,mtp_k2,mtp_k3,mtp_step,mtp_step_alt", "--batch_sizes=1",
                             "--dtypes=float32", "--sources=mixed", "--num_prompts=4", "--max_tokens=256", "--ignore_eos",
                             "--temperature=0", "--k_max=5", "--interleave", "--alt_shares_table", "--alt_step_policy={}"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
log = collections.defaultdict(list)
cur = {}
def observer(name):
    def f(ev):
        cur[name] = (len(ev.decoding), ev.result.verify_lens[0] if ev.decoding and len(ev.batch.chunks) == len(ev.decoding) else -1,
                     1e3 * (ev.finished - ev.started))
    return f
for name, llm in engines.items():
    eng = llm.engine
    eng.round_observers.append(observer(name))
    ostep = eng.step
    def step(ostep=ostep, name=name):
        c0 = time.process_time(); r = ostep(); c1 = time.process_time()
        if name in cur:
            B, d, ms = cur.pop(name)
            log[name].append((B, d, ms, 1e3 * (c1 - c0)))
        return r
    eng.step = step
st_ = engines["mtp_step_alt"].engine.control.step
o = st_.plan
def p(*a, **k):
    o(*a, **k); st_.last_probe = st_.last_check = False; return 5
st_.plan = p
for rep in range(reps):
    names = list(bargs.configs)
    order = names if rep % 2 == 0 else names[::-1]
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets["mixed"][:4], 1, 256, True, 0.0)
    print(rep, {n: round(x.tokens / x.cpu_s, 2) for n, x in runs.items()}, flush=True)
json.dump(log, open(out, "w"))
for name, rows in log.items():
    by = collections.defaultdict(list)
    for B, d, ms, cpu in rows:
        if B == 1 and d >= 0:
            by[d].append((ms, cpu))
    print(name, " ".join(f"d{d}: n={len(v)} in {st.median(x[0] for x in v):.2f} step {st.median(x[1] for x in v):.2f} out {st.median(x[1]-x[0] for x in v):.2f}"
                         for d, v in sorted(by.items())))
