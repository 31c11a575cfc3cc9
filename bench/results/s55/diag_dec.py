"""Mixed closed batch (B requests, B prompts): the draft step's decision records per re-score, with whether the closed
score was active and the served ratio at the batch's count. usage: diag_dec.py <checkout> B REPS"""
import sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
B, reps = int(sys.argv[2]), int(sys.argv[3])
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_step", f"--batch_sizes={B}", "--dtypes=float32", "--sources=mixed",
                             f"--num_prompts={B}", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5",
                             "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
ctl = engines["mtp_step"].engine.control
seen = [0]
def obs(ev):
    st = ctl.step
    ds = list(st.decisions)
    new = ds[seen[0]:] if len(ds) >= seen[0] else ds
    seen[0] = len(ds)
    for d in new:
        if d.reason in ("keep",) and d.k == d.previous_k and d.k == 0:
            continue
        view = st._depth_view
        print(f"r{ev.plan.round_id} B{len(ev.decoding)} {d.reason} {d.previous_k}->{d.k} gain {None if d.gain is None else round(d.gain, 3)} "
              f"pred { {k: round(v, 4) for k, v in d.predicted.items()} } opt { {k: round(v, 4) for k, v in d.optimistic.items()} } "
              f"closed {'none' if st._closed is None else ('gated' if not view else 'on')} served4 {st.served.ratio(len(ev.decoding))}", flush=True)
        if d.reason in ("switch", "floor"):
            a = st.window.prefix_acceptance()
            print("    a", [round(float(x), 3) for x in a[:3]], "view", [(n, [round(float(x), 2) for x in (r if not isinstance(r, float) else [r])][:2]) for n, r in (view or [])],
                  "closed(raw)", [(n, round(float(r), 2)) for n, r in (st._closed or [])], "backoff", st.backoff, flush=True)
engines["mtp_step"].engine.round_observers.append(obs)
for rep in range(reps):
    ctl.reset(); seen[0] = 0
    print("rep", rep, flush=True)
    runs = il.serve_interleaved(engines, sets["mixed"][:B], B, 256, True, 0.0)
    r = {n: x.tokens / x.cpu_s for n, x in runs.items()}
    print({n: round(v, 2) for n, v in r.items()}, "step/plain %.3f" % (r["mtp_step"] / r["plain"]), ctl.summary(), flush=True)
