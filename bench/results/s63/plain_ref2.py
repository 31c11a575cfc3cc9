"""Which rounds run plain in a drafting stream, and what each costs (stop 63)."""
import os, sys
import statistics
from pathlib import Path
sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common
from bench.adaptive_calibration import dspark_sync_b1
common.setup_threads(1)
src = sys.argv[1] if len(sys.argv) > 1 else "chat"
d, ns = dspark_sync_b1([src])
sets = common.warmed_prompt_sets({"d": d}, ns)
ctl = d.engine.control
plans, log = {}, []
plan0 = ctl.plan
def plan(decoding, caps, round_id):
    plans[round_id] = (tuple(caps), [r.num_computed for r in decoding])
    return plan0(decoding, caps, round_id)
ctl.plan = plan
for rep in range(2):
    ctl.reset()
    orig = ctl.verify.observe_round
    def obs(round_id, verify_lens, drafted, ms, pure, accepted=None, orig=orig):
        log.append((round_id, list(verify_lens), drafted, round(ms, 1), pure, plans.get(round_id)))
        return orig(round_id, verify_lens, drafted, ms, pure, accepted)
    ctl.verify.observe_round = obs
    log.clear()
    r = common.serve(d, sets[src][:4], 1, 256, ignore_eos=True)
    print("dspark tok/s", r.tokens / r.cpu_s, ctl.summary())
    ids = {x[0]: i for i, x in enumerate(log)}
    for i, x in enumerate(log):
        if not x[2]:
            print("plain", x, "| before:", log[i - 1] if i else None, "| after:", log[i + 1] if i + 1 < len(log) else None)
    print("round ids with no observe:", sorted(set(range(log[0][0], log[-1][0])) - set(ids))[:20])
