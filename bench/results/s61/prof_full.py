"""Stop 61: whole-run cProfile of DSpark w = 7 sync verify against fixed L2 (prefix hook) at B = 1, alternating twice in one
process:  OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s61/prof_full.py chat"""
import cProfile, pstats, sys, os
from pathlib import Path
sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common
from bench.adaptive_calibration import dspark_sync_b1
from bench.adaptive_hooks import Hook
common.setup_threads(1)
src = sys.argv[1]
d, ns = dspark_sync_b1([src])
f = common.build_llm("float32", "DSpark", 7, None, max_seqs=1, max_model_len=1024, graph_decode_batch_sizes=(1,))
sets = common.warmed_prompt_sets({"d": d, "f": f}, ns)
for name in ("sync", "L2", "sync", "L2"):
    pr = cProfile.Profile()
    if name == "sync":
        d.engine.control.reset()
        pr.enable(); r = common.serve(d, sets[src][:4], 1, 256, ignore_eos=True); pr.disable()
    else:
        with Hook(f, "prefix", 2):
            pr.enable(); r = common.serve(f, sets[src][:4], 1, 256, ignore_eos=True); pr.disable()
    print(f"== {name}: {r.tokens / r.cpu_s:.1f} tok/s, rounds?", flush=True)
    pstats.Stats(pr).sort_stats("tottime").print_stats(22)
