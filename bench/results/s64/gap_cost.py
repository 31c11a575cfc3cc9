"""Stop 64: at B = 4 (a closed batch), DSpark sync verify's round times by how many plain rounds came before a
drafted round (its draft first refreshes the context those rounds left pending), beside plain rounds, and the tokens
per ms each kind committed.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s64/gap_cost.py code [B] [RUNS]
"""
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common  # noqa: E402
from bench.adaptive_calibration import dspark_sync  # noqa: E402

common.setup_threads(1)
src = sys.argv[1]
B = int(sys.argv[2]) if len(sys.argv) > 2 else 4
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
d, ns = dspark_sync([src], B, B)
sets = common.warmed_prompt_sets({"d": d}, ns)
ctl = d.engine.control
rows = []
orig = ctl.observe


def observe(result, round_id, plan=None, seconds=None, decode_only=False):
    if plan is not None and seconds is not None and decode_only and len(result.verify_lens) == B:
        rows.append((plan.num_steps > 0, sum(result.verify_lens), 1000.0 * seconds, B + sum(result.num_accepted)))
    return orig(result, round_id, plan=plan, seconds=seconds, decode_only=decode_only)


ctl.observe = observe
for _ in range(runs):
    ctl.reset()
    common.serve(d, sets[src][:B], B, 256, ignore_eos=True)
by = defaultdict(list)
gap = 0
tokens = defaultdict(lambda: [0, 0.0])
for drafted, verified, ms, got in rows:
    tokens[drafted][0] += got
    tokens[drafted][1] += ms
    if drafted:
        key = "after 1" if gap == 1 else "after 2-4" if gap <= 4 else "after 5-16" if gap <= 16 else \
            "after >16" if gap > 16 else "after drafted"
        if gap == 0:
            key = "after drafted"
        by[(key, verified)].append(ms)
        gap = 0
    else:
        by[("plain", 0)].append(ms)
        gap += 1
for (key, verified), xs in sorted(by.items()):
    print(f"{key:14s} verified {verified:2d}: n {len(xs):4d} median {statistics.median(xs):6.1f} ms", flush=True)
for drafted, (got, ms) in sorted(tokens.items()):
    print(f"{'drafted' if drafted else 'plain'} rounds: {got} tokens in {ms:.0f} ms = {got / ms:.4f} tokens per ms")
