"""Plain, the draft-step engine forced to k = 0 and DSpark sync forced never to draft, in one process (4 alternating
repeats, 256 tokens), then a cProfile of 64 tokens of each: do the adaptive engines' plain rounds cost more?

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s36/dsk0.py 8 chat [TEMPERATURE]
"""
import cProfile
import io
import pstats
import statistics
import sys

from inproc import common, engines_for, never_drafting, tok_s

B = int(sys.argv[1]); src = sys.argv[2]; toks = 256
temp = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
engines, stream = engines_for("plain,mtp_step,dspark7_sync", B, src, toks)
res = {n: [] for n in engines}
for rep in range(4):
    order = list(engines) if rep % 2 == 0 else list(engines)[::-1]
    for n in order:
        run = common.serve(never_drafting(engines[n]), stream, B, toks, ignore_eos=True, temperature=temp)
        res[n].append(tok_s(run))
for n, v in res.items():
    print(n, [round(x, 1) for x in v], round(statistics.median(v) / statistics.median(res["plain"]), 3), flush=True)
for n in engines:
    pr = cProfile.Profile(); llm = never_drafting(engines[n]); pr.enable(); common.serve(llm, stream, B, 64, ignore_eos=True, temperature=temp); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14); print("=====", n); print(s.getvalue()[-3500:])
