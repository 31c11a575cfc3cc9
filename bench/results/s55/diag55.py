"""Mixed closed batch: the table's k1/k0 per request count against the served ratios, per rep; and per-round kinds.
usage: diag55.py <checkout> B REPS OUT.json [source] [num_prompts]"""
import sys, tempfile, json, collections
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
B, reps, out = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
src = sys.argv[5] if len(sys.argv) > 5 else "mixed"
nprompts = int(sys.argv[6]) if len(sys.argv) > 6 else B
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_k1,mtp_step", f"--batch_sizes={B}", "--dtypes=float32",
                             f"--sources={src}", f"--num_prompts={nprompts}", "--max_tokens=256", "--ignore_eos",
                             "--temperature=0", "--k_max=5", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
ctl = engines["mtp_step"].engine.control
st_ = ctl.step
def table_ratio(b):
    bcap = st_.pad_requests(b); t, _ = st_.costs.bucket(bcap); t = st_.costs.for_batch(b, bcap, t)
    return t[1] / t[0], t[0]
print("table k1/k0 per count", {b: tuple(round(x, 3) for x in table_ratio(b)) for b in range(1, B + 1)}, flush=True)
log = collections.defaultdict(list)
def observer(name):
    def f(ev):
        p = ev.plan
        log[name].append(dict(rid=p.round_id, B=len(ev.decoding), dec=len(ev.decoding) == len(ev.batch.chunks),
                              k=p.num_steps, probe=p.probe, check=p.cost_check, vl=list(ev.result.verify_lens),
                              acc=list(ev.result.num_accepted), ms=1e3 * (ev.finished - ev.started)))
    return f
for name, llm in engines.items():
    llm.engine.round_observers.append(observer(name))
names = list(bargs.configs)
for rep in range(reps):
    ctl.reset()
    for n in names: log[n].append({"rep": rep})
    order = names if rep % 2 == 0 else names[::-1]
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets[src][:nprompts], B, 256, True, 0.0)
    r = {n: x.tokens / x.cpu_s for n, x in runs.items()}
    st_ = ctl.step
    served = {b: (None if st_.served.ratio(b) is None else round(st_.served.ratio(b), 3), [round(x, 3) for x in st_.served.samples(b)]) for b in range(1, B + 1)}
    print(rep, {n: round(v, 2) for n, v in r.items()}, "step/plain %.3f k1/plain %.3f" % (r["mtp_step"] / r["plain"], r["mtp_k1"] / r["plain"]),
          ctl.summary(), "served", served, flush=True)
json.dump(log, open(out, "w"))
