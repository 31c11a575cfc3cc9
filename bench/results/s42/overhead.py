"""Where does an engine step's time go outside rounds.run? (plain rounds, B=4, mixed)"""
import sys, time, statistics, cProfile, pstats, tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from bench import common
import bench.step_cost_check as scc

args = scc.parse_args(["--batch_size=4", "--k_max=2", "--max_tokens=256"])
common.setup_threads(1)
with tempfile.TemporaryDirectory() as tmp:
    llm, table, calib = scc.calibrated_costs(args, Path(tmp))
print("table", table)
prompts = common.prompt_sets(llm.tokenizer, ["mixed"], 4, 192, "auto")["mixed"]
common.serve(llm, prompts[:2], 2, 4, ignore_eos=True)
engine = llm.engine
for k in (0, 1):
    scc.force_k(llm, k)
    run_t = []
    orig = engine.rounds.run
    def timed(*a, **kw):
        c = time.process_time(); r = orig(*a, **kw); run_t.append(time.process_time() - c); return r
    engine.rounds.run = timed
    from adaspec.sampling_params import SamplingParams
    params = SamplingParams(temperature=0, max_tokens=256, ignore_eos=True)
    for p in prompts:
        engine.add_request(list(p.ids), params)
    steps = []
    prof = cProfile.Profile()
    while engine.has_unfinished():
        n = len(run_t); c0 = time.process_time()
        prof.enable(); engine.step(); prof.disable()
        steps.append((time.process_time() - c0, run_t[n] if len(run_t) > n else 0))
    engine.rounds.run = orig
    dec = steps[10:-10]
    print(f"k={k}: step median {1000*statistics.median(s for s,_ in dec):.2f} ms, run median {1000*statistics.median(r for _,r in dec):.2f}, outside median {1000*statistics.median(s-r for s,r in dec):.2f}")
    st = pstats.Stats(prof); st.sort_stats("cumulative").print_stats(30)
