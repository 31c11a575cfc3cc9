"""Stop 64: the sync gate's verdict round by round for four requests (a closed batch): the weight it was given, what
its newest lagged round's early stop predicted (tokens per ms at the G it reaches, and a plain round's), and whether it
drafted (another opinion may say yes where the model says plain).

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s64/gate_trace.py prose
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common  # noqa: E402
from bench.adaptive_calibration import dspark_sync  # noqa: E402

common.setup_threads(1)
src, B = sys.argv[1], 4
d, ns = dspark_sync([src], B, B)
sets = common.warmed_prompt_sets({"d": d}, ns)
ctl = d.engine.control
ctl.reset()
v = ctl.verify
orig = type(v).predicts_gain
log = []


def traced(*a, **k):
    out = orig(v, *a, **k)
    bcap = v.pad_requests(a[0])
    tv = k.get("token_value", 1.0)
    dd = v._budget(a[0], bcap, None, k.get("kv_len"), tv, early_stop=True)
    log.append((k.get("round_id"), tv, out, dd.reason[:30], {g: round(x, 4) for g, x in dd.predicted.items()},
                len(v.lagged)))
    return out


v.predicts_gain = traced
common.serve(d, sets[src][:B], B, 256, ignore_eos=True)
print("(round, gate weight, drafted, model's verdict, predicted tokens per ms {G: drafted, 0: plain}, lagged rounds)")
for row in log[:40]:
    print(row)
print(ctl.summary())
