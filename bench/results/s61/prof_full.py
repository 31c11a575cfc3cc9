"""Stop 61: whole-run cProfile of DSpark w = 7 sync verify against fixed L2 (prefix hook) at B = 1, alternating twice in one
process:  OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s61/prof_full.py chat"""
import cProfile, pstats, sys, tempfile, os
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common
from bench.adaptive_calibration import write_calibration_files
from bench.adaptive_hooks import Hook
common.setup_threads(1)
src = sys.argv[1]
ns = SimpleNamespace(calibration_json=None, batch_sizes=[1], max_model_len=1024, sources=[src], num_prompts=4,
                     prompt_tokens=192, alt_step_policy="{}")
files = write_calibration_files(ns, Path(tempfile.mkdtemp()))
d = common.build_llm("float32", "DSpark", 7, None, max_seqs=1, max_model_len=1024, enable_adaptive_target_verify=True,
                     adaptive_target_verify_calibration=str(files["dspark7"]), graph_decode_batch_sizes=(1,))
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
