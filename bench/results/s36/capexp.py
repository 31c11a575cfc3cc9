"""Plain, DSpark sync forced never to draft, and the same with the target's layer capture and the refresh
entries switched off, in one process (4 alternating repeats, temperature 0.8, B = 16, mixed, 256 tokens):
does keeping the deferred refresh's features cost the plain rounds anything?

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s36/capexp.py
"""
import statistics

from inproc import capture_variants, common, engines_for, tok_s

B, src, temp = 16, "mixed", 0.8
engines, stream = engines_for("plain,mtp_step,dspark7_sync", B, src, 256)
variant = capture_variants(engines)
res = {v: [] for v in ("plain", "dspark", "nocap")}
for rep in range(4):
    order = list(res) if rep % 2 == 0 else list(res)[::-1]
    for v in order:
        run = common.serve(variant(v), stream, B, 256, ignore_eos=True, temperature=temp)
        res[v].append(tok_s(run))
for v, x in res.items():
    print(v, [round(t, 1) for t in x], round(statistics.median(x) / statistics.median(res["plain"]), 3), flush=True)
