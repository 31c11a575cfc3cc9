"""Stop 62: wall time per call of DSpark w = 7 sync verify's controller entry points over one run at B = 1 (as
bench/adaptive_hooks.ControllerTimer times them, split by entry point and by the gate's / admission's parts).

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s62/ctl_times.py code
"""
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common  # noqa: E402
from bench.adaptive_calibration import dspark_sync_b1  # noqa: E402
from bench.adaptive_hooks import time_calls  # noqa: E402

common.setup_threads(1)
src = sys.argv[1] if len(sys.argv) > 1 else "code"
d, ns = dspark_sync_b1([src])
sets = common.warmed_prompt_sets({"d": d}, ns)
ctl = d.engine.control
tot, calls = defaultdict(float), defaultdict(int)


def wrap(obj, name, label):
    def add(seconds):
        tot[label] += seconds
        calls[label] += 1
    time_calls(obj, name, add)


for rep in range(2):
    ctl.reset()
    tot.clear(), calls.clear()
    v = ctl.verify
    wrap(ctl, "plan", "plan")
    wrap(ctl, "observe", "observe")
    wrap(v, "admit", "admit")
    wrap(v, "predicts_gain", "  plan>predicts_gain")
    wrap(v, "observe", "  observe>verify.observe")
    wrap(v, "observe_round", "  observe>observe_round")
    wrap(ctl.floor, "decide", "  plan>floor.decide")
    r = common.serve(d, sets[src][:4], 1, 256, ignore_eos=True)
    for o in (ctl, v, ctl.floor):
        for k in list(o.__dict__):
            if k in ("plan", "observe", "admit", "predicts_gain", "observe_round", "decide"):
                del o.__dict__[k]
    n = r.stats.get("decode_rounds")
    main = sum(tot[k] for k in ("plan", "observe", "admit"))
    print(f"rep {rep}: {r.tokens / r.wall_s:.2f} tok/s, wall {r.wall_s:.2f} s, {n} rounds; controller {main:.3f} s "
          f"= {100 * main / r.wall_s:.2f}% = {1e3 * main / n:.3f} ms/round", flush=True)
    for k in tot:
        print(f"  {k:28s} {calls[k]:5d} calls {1e6 * tot[k] / max(calls[k], 1):8.1f} us/call {tot[k]:.3f} s")
