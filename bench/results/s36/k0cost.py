"""The draft-step engine forced to k = 0 (no probes), the engine as it runs, and plain, in one process
(3 alternating repeats): what the step engine's plain rounds and its probes cost.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s36/k0cost.py 16 chat
"""
import statistics
import sys

from inproc import common, engines_for, never_drafting, tok_s

B = int(sys.argv[1]); src = sys.argv[2]; toks = int(sys.argv[3]) if len(sys.argv) > 3 else 256
engines, stream = engines_for("plain,mtp_k1,mtp_step", B, src, toks)
res = {"plain": [], "step_k0": [], "step": []}
for rep in range(3):
    for name in (["plain", "step_k0", "step"] if rep % 2 == 0 else ["step", "step_k0", "plain"]):
        llm = engines["plain" if name == "plain" else "mtp_step"]
        if name == "step_k0":
            never_drafting(llm)
        elif name == "step":
            llm.engine.control.reset()
        run = common.serve(llm, stream, B, toks, ignore_eos=True)
        res[name].append(tok_s(run))
        if name != "plain":
            print(name, dict(llm.engine.control.step.k_histogram), round(res[name][-1], 1), flush=True)
for k, v in res.items():
    print(k, [round(x, 1) for x in v], "median ratio to plain", round(statistics.median(v) / statistics.median(res["plain"]), 3))
