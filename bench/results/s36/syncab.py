"""Plain, DSpark sync and DSpark async as they run, in one process (4 alternating repeats, greedy, 256 tokens),
with each adaptive engine's round summary.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s36/syncab.py 4 prose
"""
import statistics
import sys

from inproc import common, engines_for, tok_s

B = int(sys.argv[1]); src = sys.argv[2]
engines, stream = engines_for("plain,dspark7_sync,dspark7_async", B, src, 256)
res = {n: [] for n in engines}
hist = {}
for rep in range(4):
    order = list(engines) if rep % 2 == 0 else list(engines)[::-1]
    for n in order:
        llm = engines[n]
        if llm.engine.control is not None:
            llm.engine.control.reset()
        run = common.serve(llm, stream, B, 256, ignore_eos=True)
        res[n].append(tok_s(run))
        if llm.engine.control is not None:
            hist[n] = llm.engine.control.summary()
for n, v in res.items():
    print(n, [round(x, 1) for x in v], round(statistics.median(v) / statistics.median(res["plain"]), 3), hist.get(n), flush=True)
