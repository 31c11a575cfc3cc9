"""Stop 37: plain, DSpark sync forced never to draft, and the same with the target's layer capture and the
refresh entries switched off, in one process, greedy and at temperature 0.8 (4 alternating repeats each,
B = 4, mixed, TOKENS tokens): is the paired cells' ~3% gap at T = 0.8 work the never-drafting engine adds?

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s37/capexp_b4.py [TOKENS]
"""
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s36"))
from inproc import capture_variants, common, engines_for, tok_s  # noqa: E402

B, src = 4, "mixed"
toks = int(sys.argv[1]) if len(sys.argv) > 1 else 128
engines, stream = engines_for("plain,dspark7_sync", B, src, toks)
variant = capture_variants(engines)
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
