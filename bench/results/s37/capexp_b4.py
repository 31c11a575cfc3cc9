"""Stop 37: plain, DSpark sync forced never to draft, and the same with the target's layer capture and the
refresh entries switched off, in one process, greedy and at temperature 0.8 (4 alternating repeats each,
B = 4, mixed, TOKENS tokens): is the paired cells' ~3% gap at T = 0.8 work the never-drafting engine adds?

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s37/capexp_b4.py [TOKENS]
"""
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s36"))
from inproc import common, engines_for, never_drafting, tok_s  # noqa: E402

B, src = 4, "mixed"
toks = int(sys.argv[1]) if len(sys.argv) > 1 else 128
engines, stream = engines_for("plain,dspark7_sync", B, src, toks)
eng = engines["dspark7_sync"].engine
orig_add, orig_cap = eng.rounds._add_entries, eng.rounds.capture_layers


def variant(v):
    llm = never_drafting(engines["plain" if v == "plain" else "dspark7_sync"])
    if v == "nocap":
        eng.rounds._add_entries = lambda out, entries: None
        eng.rounds.capture_layers = ()
    elif v == "dspark":
        eng.rounds._add_entries = orig_add
        eng.rounds.capture_layers = orig_cap
    eng.rounds.pending.clear()
    return llm


for temp in (0.0, 0.8):
    res = {v: [] for v in ("plain", "dspark", "nocap")}
    for rep in range(4):
        order = list(res) if rep % 2 == 0 else list(res)[::-1]
        for v in order:
            run = common.serve(variant(v), stream, B, toks, ignore_eos=True, temperature=temp)
            res[v].append(tok_s(run))
    for v, x in res.items():
        print(f"T={temp} {v:6s} {[round(t, 1) for t in x]} x{statistics.median(x) / statistics.median(res['plain']):.3f}",
              flush=True)
