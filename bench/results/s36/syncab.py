"""Plain, DSpark sync and DSpark async as they run, in one process (4 alternating repeats, greedy, 256 tokens),
with each adaptive engine's round summary.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s36/syncab.py 4 prose
"""
import sys, statistics
sys.argv = ['x', sys.argv[1], sys.argv[2]]
src = open(__import__('pathlib').Path(__file__).with_name('dsk0.py')).read().split("res = {n: [] for n in engines}")[0]
src = src.replace('"--configs=plain,mtp_step,dspark7_sync"', '"--configs=plain,dspark7_sync,dspark7_async"')
exec(src)
res = {n: [] for n in engines}
hist = {}
for rep in range(4):
    order = list(engines) if rep % 2 == 0 else list(engines)[::-1]
    for n in order:
        llm = engines[n]
        if llm.engine.control is not None:
            llm.engine.control.reset()
        run = common.serve(llm, stream, B, 256, ignore_eos=True)
        res[n].append(sum(map(len, run.outputs)) / run.cpu_s)
        if llm.engine.control is not None:
            hist[n] = llm.engine.control.summary()
for n, v in res.items():
    print(n, [round(x, 1) for x in v], round(statistics.median(v) / statistics.median(res["plain"]), 3), hist.get(n), flush=True)
