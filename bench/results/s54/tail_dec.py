"""The draft step's decisions in a closed batch's tail (mixed, B=4, 4 prompts): per round with fewer than 4 requests,
the decision record, the per-request estimate a1 and the drafts each has in the window. usage: tail_dec.py <checkout> REPS"""
import sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_step", "--batch_sizes=4", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
ctl = engines["mtp_step"].engine.control
eng = engines["mtp_step"].engine
import os
R4 = float(os.environ.get("R4", "0"))  # when set: every k >= 1 at Bcap 4 scaled so that k = 1 costs R4 x plain there
if R4:
    t = ctl.table; o = t.cost_ms
    f = R4 * o(4, 0) / o(4, 1)
    object.__setattr__(t, "cost_ms", lambda bcap, x, kv_len=None: (None if (c := o(bcap, x, kv_len)) is None
                                                                     else c * (f if bcap == 4 and x >= 1 else 1.0)))
    print("Bcap 4 table", {k: round(t.cost_ms(4, k), 2) for k in range(6)}, flush=True)
def obs(ev):
    B = len(ev.decoding)
    st = ctl.step
    if B < 4 and B > 0:
        d = st.decisions[-1] if st.decisions else None
        per = st.window.request_prefix_acceptance()
        print(f"r{ev.plan.round_id} B{B} k{ev.plan.num_steps} vl{list(ev.result.verify_lens)} acc{list(ev.result.num_accepted)} "
              f"ms {1e3*(ev.finished-ev.started):.1f} | dec {d.completed if d else None} {d.reason if d else None} "
              f"{ {k: round(v, 4) for k, v in d.predicted.items()} if d else None} | a1 {None if per is None else [round(float(x), 2) for x in per[:, 0]]} "
              f"drafts {[st.window.drafts_of(r.request_id) for r in ev.decoding]} rem {[r.params.max_tokens - len(r.output_token_ids) for r in ev.decoding]}", flush=True)
eng.round_observers.append(obs)
for rep in range(int(sys.argv[2])):
    ctl.reset()
    print("rep", rep, flush=True)
    runs = il.serve_interleaved(engines, sets["mixed"][:4], 4, 256, True, 0.0)
    print({n: round(x.tokens / x.cpu_s, 2) for n, x in runs.items()}, ctl.summary(), flush=True)
