"""The draft step on one stream and batch size, in one process: the cost table at its request bucket,
the controller's decisions (first 80), and plain / MTP k = 1 / mtp_step throughput (2 alternating repeats).

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s36/stepdbg.py 8 prose
"""
import sys

from inproc import common, engines_for, tok_s

B = int(sys.argv[1]); src = sys.argv[2]; toks = int(sys.argv[3]) if len(sys.argv) > 3 else 256
engines, stream = engines_for("plain,mtp_k1,mtp_step", B, src, toks)
ctl = engines["mtp_step"].engine.control
bcap = ctl.geometry.pad_requests(B)
tab = {k: ctl.step.cost_ms(bcap, k) for k in range(4)}
print("table bcap", bcap, {k: round(v, 2) for k, v in tab.items()}, "ratios", {k: round(v / tab[0], 3) for k, v in tab.items()})
for rep in range(2):
    for name in (["plain", "mtp_k1", "mtp_step"] if rep == 0 else ["mtp_step", "mtp_k1", "plain"]):
        llm = engines[name]
        if name == "mtp_step":
            llm.engine.control.reset()
        run = common.serve(llm, stream, B, toks, ignore_eos=True)
        extra = ""
        if name == "mtp_step":
            st = llm.engine.control.step
            extra = str(dict(st.k_histogram))
            if rep == 0:
                for d in list(st.decisions)[:80]:
                    pr = {k: round(v, 4) for k, v in d.predicted.items()}
                    print("  ", d.completed, d.previous_k, "->", d.k, d.reason, pr, None if d.gain is None else round(d.gain, 3),
                          {k: round(v, 4) for k, v in d.optimistic.items()})
        print(rep, name, f"{tok_s(run):.1f} tok/s", extra, flush=True)
