"""Per request and per round: the draft step (default), the same forced to ceiling K, plain; mixed B=1 interleaved."""
import sys, tempfile, time, statistics, json, collections
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
K, reps, out = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
src = sys.argv[5] if len(sys.argv) > 5 else "mixed"
common.setup_threads(1)
cfgs = "plain,mtp_step,mtp_step_alt"
bargs = adaptive.parse_args([f"--configs={cfgs}", "--batch_sizes=1", "--dtypes=float32", f"--sources={src}",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5",
                             "--interleave", "--alt_shares_table", "--alt_step_policy={}"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
log = collections.defaultdict(list)
def instrument(name, force):
    ctl = engines[name].engine.control
    st = ctl.step
    oplan, oobs = ctl.plan, ctl.observe
    def plan(decoding, caps, round_id):
        if force:
            o = st.plan
            def p(*a, **k):
                o(*a, **k); st.last_probe = st.last_check = False; return K
            st.plan = p
        p_ = oplan(decoding, caps, round_id)
        if force: st.plan = o
        d = st.decisions[-1] if st.decisions else None
        log[name].append(dict(rid=round_id, req=decoding[0].request_id if decoding else None, B=len(decoding),
                              k=p_.num_steps, ctl_k=st.k, ceiling=p_.ceiling, probe=p_.probe, check=p_.cost_check,
                              reason=d.reason if d else None, dcomp=d.completed if d else None))
        return p_
    def observe(result, round_id, plan=None, seconds=None, decode_only=False):
        for e in reversed(log[name][-4:]):
            if e.get("rid") == round_id:
                e.update(vl=list(result.verify_lens), acc=list(result.num_accepted), ms=None if seconds is None else 1e3 * seconds,
                         dec=decode_only)
        return oobs(result, round_id, plan, seconds, decode_only)
    ctl.plan, ctl.observe = plan, observe
instrument("mtp_step", False); instrument("mtp_step_alt", True)
names = bargs.configs
res = []
for rep in range(reps):
    order = names if rep % 2 == 0 else names[::-1]
    for n in names: log[n].append({"rep": rep})
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets[src][:4], 1, 256, True, 0.0)
    r = {n: x.tokens / x.cpu_s for n, x in runs.items()}
    res.append(r)
    print(rep, {n: round(v, 2) for n, v in r.items()}, "step/forced %.3f" % (r["mtp_step"] / r["mtp_step_alt"]), flush=True)
    for n in ("mtp_step",):
        print("  summary", engines[n].engine.control.summary(), flush=True)
json.dump({"log": log, "res": res}, open(out, "w"), separators=(",", ":"))
