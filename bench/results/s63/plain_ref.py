"""Which plain rounds the served pricing's reference reads in a mostly drafting stream (stop 63)."""
import os, sys, statistics
from pathlib import Path
sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common
from bench.adaptive_calibration import dspark_sync_b1
common.setup_threads(1)
src = sys.argv[1] if len(sys.argv) > 1 else "chat"
d, ns = dspark_sync_b1([src])
p = common.build_llm("float32", "none", None, None, max_seqs=1, max_model_len=1024)
sets = common.warmed_prompt_sets({"d": d, "p": p}, ns)
ctl = d.engine.control
log = []
orig = ctl.verify.observe_round
def obs(round_id, verify_lens, drafted, ms, pure, accepted=None):
    log.append((round_id, list(verify_lens), drafted, round(ms, 1), pure, ctl.engine.scheduler.waiting and len(ctl.engine.scheduler.waiting)))
    return orig(round_id, verify_lens, drafted, ms, pure, accepted)
for rep in range(2):
    ctl.reset()
    orig = ctl.verify.observe_round
    ctl.verify.observe_round = obs
    log.clear()
    r = common.serve(p, sets[src][:4], 1, 256, ignore_eos=True)
    print("plain tok/s", r.tokens / r.cpu_s, "ms/token", 1000 * r.cpu_s / r.tokens)
    r = common.serve(d, sets[src][:4], 1, 256, ignore_eos=True)
    print("dspark tok/s", r.tokens / r.cpu_s, ctl.summary())
    print("plain rounds:", [x for x in log if not x[2]])
    print("served plain deque:", ctl.verify.served._plain)
    for G in range(1, 9):
        ms = [x[3] for x in log if x[2] and x[4] and len(x[1]) == 1 and x[1][0] + 1 == G]
        if ms:
            print("G", G, "n", len(ms), "median ms", statistics.median(ms))
