"""Plain, DSpark sync forced never to draft, and the same with the target's layer capture and the refresh
entries switched off, in one process (4 alternating repeats, temperature 0.8, B = 16, mixed, 256 tokens):
does keeping the deferred refresh's features cost the plain rounds anything?

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s36/capexp.py
"""
import sys, statistics
sys.argv = ['x', '16', 'mixed', '0.8']
src = open(__import__('pathlib').Path(__file__).with_name('dsk0.py')).read().split("res = {n: [] for n in engines}")[0]
exec(src)
eng = engines["dspark7_sync"].engine
orig_add, orig_cap = eng.rounds._add_entries, eng.rounds.capture_layers
def variant(v):
    llm = force("plain" if v == "plain" else "dspark7_sync")
    if v == "nocap":
        eng.rounds._add_entries = lambda out, entries: None
        eng.rounds.capture_layers = ()
    elif v == "dspark":
        eng.rounds._add_entries = orig_add
        eng.rounds.capture_layers = orig_cap
    eng.rounds.pending.clear()
    return llm
res = {v: [] for v in ("plain", "dspark", "nocap")}
for rep in range(4):
    order = list(res) if rep % 2 == 0 else list(res)[::-1]
    for v in order:
        run = common.serve(variant(v), stream, B, 256, ignore_eos=True, temperature=temp)
        res[v].append(sum(map(len, run.outputs)) / run.cpu_s)
for v, x in res.items():
    print(v, [round(t, 1) for t in x], round(statistics.median(x) / statistics.median(res["plain"]), 3), flush=True)
