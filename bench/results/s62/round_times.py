"""Stop 62: per-round wall times by verify rows, same process: plain, fixed L (full-width DSpark engine with the
prefix hook), DSpark sync verify (adaptive), and the sync engine with its admission forced to L drafts (`forcedL`:
every round drafts, admit returns L) -- what the sync path costs beyond fixed L's.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s62/round_times.py code plain,L1,L2,sync,forced2 3 [TEMPERATURE]

Per configuration it also prints the median step time by verify rows (1 + drafts verified; 1 is a plain round, or
a drafted one that admitted nothing; "after": a drafted round right after a 1-row round).
"""
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common  # noqa: E402
from bench.adaptive_calibration import dspark_sync_b1  # noqa: E402
from bench.adaptive_hooks import Hook  # noqa: E402

common.setup_threads(1)
src, variants = sys.argv[1], sys.argv[2].split(",")
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
temp = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
d, ns = dspark_sync_b1([src])
f = common.build_llm("float32", "DSpark", 7, None, max_seqs=1, max_model_len=1024, graph_decode_batch_sizes=(1,))
p = common.build_llm("float32", "none", None, None, max_seqs=1, max_model_len=1024)
sets = common.warmed_prompt_sets({"d": d, "p": p, "f": f}, ns)


def timed_serve(llm):
    eng, log, rows = llm.engine, [], []
    step = eng.step

    def tstep():
        rows.append(None)
        t0 = time.perf_counter()
        out = step()
        log.append((1000 * (time.perf_counter() - t0), rows[-1]))
        return out

    class Rec(common.RoundRecorder):
        def observe(self, verify_lens, accepted):
            if verify_lens:
                rows[-1] = 1 + verify_lens[0]  # 1: a plain round (or a drafted one that admitted nothing)
            super().observe(verify_lens, accepted)
    eng.step = tstep
    recorder, common.RoundRecorder = common.RoundRecorder, Rec
    try:
        r = common.serve(llm, sets[src][:4], 1, 256, ignore_eos=True, temperature=temp)
    finally:
        del eng.step
        common.RoundRecorder = recorder
    return r, log


def by_rows(log) -> str:
    groups, prev = defaultdict(list), None
    for ms, g in log:
        key = "after" if prev == 1 and g not in (1, None) else g
        groups[key].append(ms)
        prev = g
    return ", ".join(f"{k}: {statistics.median(v):.1f} ms x{len(v)}" for k, v in
                     sorted(groups.items(), key=lambda kv: str(kv[0])) if k is not None)


def run(v):
    ctl = d.engine.control
    if v == "plain":
        return timed_serve(p)
    if v.startswith("L"):
        with Hook(f, "prefix", int(v[1:])):
            return timed_serve(f)
    ctl.reset()
    if v.startswith("forced"):
        L = int(v[6:])
        floor = ctl.floor
        ctl.verify.admit = lambda P, round_id=None, max_lens=None, kv_len=None, token_value=1.0: \
            [min(L, int(c)) for c in (max_lens if max_lens is not None else [L] * int(P.shape[0]))]
        ctl.floor = None
        try:
            return timed_serve(d)
        finally:
            del ctl.verify.admit
            ctl.floor = floor
    return timed_serve(d)


res, ref = defaultdict(list), None
for rep in range(reps):
    for v in (variants if rep % 2 == 0 else variants[::-1]):
        r, log = run(v)
        rounds = r.stats.get("decode_rounds")
        ms = [x[0] for x in log]
        res[v].append((r.tokens / r.cpu_s, statistics.median(ms), sum(ms), len(ms), rounds))
        if v == "plain":
            ref = r.outputs
        eq = "=plain" if ref is None or r.outputs == ref else "MISMATCH"
        extra = "" if v in ("plain",) or v.startswith("L") else f" {d.engine.control.summary()}"
        print(f"rep {rep} {v}: {r.tokens / r.cpu_s:.2f} tok/s, steps {len(ms)}, median step {statistics.median(ms):.2f} ms,"
              f" mean {sum(ms) / len(ms):.2f} ms, {eq}{extra}\n    by rows: {by_rows(log)}", flush=True)
pl = [x[0] for x in res["plain"]]
for v in variants:
    xs = [a[0] / b for a, b in zip(res[v], pl)]
    print(f"== {v}: x plain {' '.join(f'{x:.3f}' for x in xs)} median {statistics.median(xs):.3f}; median step ms "
          f"{statistics.median([a[1] for a in res[v]]):.2f}; steps {res[v][-1][3]}")
