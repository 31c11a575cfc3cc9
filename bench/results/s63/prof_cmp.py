"""cProfile of one chat run at B = 1: DSpark sync verify against fixed L2 (same process), functions whose own time
differs most (stop 63)."""
import os, sys
import cProfile, pstats
from pathlib import Path
sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common
from bench.adaptive_calibration import dspark_sync_b1
from bench.adaptive_hooks import Hook
common.setup_threads(1)
src = sys.argv[1] if len(sys.argv) > 1 else "chat"
d, ns = dspark_sync_b1([src])
f = common.build_llm("float32", "DSpark", 7, None, max_seqs=1, max_model_len=1024, graph_decode_batch_sizes=(1,))
sets = common.warmed_prompt_sets({"d": d, "f": f}, ns)
stats = {}
for name in ("L2", "sync", "L2", "sync"):
    pr = cProfile.Profile()
    if name == "L2":
        with Hook(f, "prefix", 2):
            pr.enable(); r = common.serve(f, sets[src][:4], 1, 256, ignore_eos=True); pr.disable()
    else:
        d.engine.control.reset()
        pr.enable(); r = common.serve(d, sets[src][:4], 1, 256, ignore_eos=True); pr.disable()
    print(name, f"{r.tokens / r.cpu_s:.2f} tok/s", flush=True)
    st = pstats.Stats(pr).stats
    agg = stats.setdefault(name, {})
    for (fn, line, func), (cc, nc, tt, ct, callers) in st.items():
        k = f"{os.path.basename(fn)}:{line}:{func}"
        a = agg.setdefault(k, [0, 0.0, 0.0])
        a[0] += nc; a[1] += tt; a[2] += ct
keys = set(stats["L2"]) | set(stats["sync"])
rows = sorted(keys, key=lambda k: -abs(stats["sync"].get(k, [0, 0, 0])[1] - stats["L2"].get(k, [0, 0, 0])[1]))
print(f"{'function':70s} {'L2 calls':>9s} {'L2 tt s':>8s} {'sync calls':>10s} {'sync tt s':>9s} {'sync ct s':>9s}")
for k in rows[:45]:
    a, b = stats["L2"].get(k, [0, 0, 0]), stats["sync"].get(k, [0, 0, 0])
    print(f"{k[:70]:70s} {a[0]:9d} {a[1]:8.3f} {b[0]:10d} {b[1]:9.3f} {b[2]:9.3f}")
print("total tt L2", sum(v[1] for v in stats["L2"].values()), "sync", sum(v[1] for v in stats["sync"].values()))
