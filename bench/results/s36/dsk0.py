"""Plain, the draft-step engine forced to k = 0 and DSpark sync forced never to draft, in one process (4 alternating
repeats, 256 tokens), then a cProfile of 64 tokens of each: do the adaptive engines' plain rounds cost more?

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s36/dsk0.py 8 chat [TEMPERATURE]
"""
import sys, statistics, cProfile, pstats, io
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3]))
from bench import adaptive as A, common
from pathlib import Path
import tempfile
B = int(sys.argv[1]); src = sys.argv[2]; toks = 256
temp = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
args = A.parse_args(["--configs=plain,mtp_step,dspark7_sync", "--k_max=3", "--dtypes=float32", f"--batch_sizes={B}",
                     f"--sources={src}", "--num_prompts=4", f"--max_tokens={toks}", "--ignore_eos", "--plot_dir="])
common.setup_threads(1); common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = A.write_calibration_files(args, wd)
engines, calib = A.build_engines(args, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, args)
stream = sets[src][:max(4, B)]
def force(name):
    llm = engines[name]
    ctl = llm.engine.control
    if ctl is None: return llm
    ctl.reset()
    if ctl.step is not None:
        st = ctl.step; st.k, st._cold, st.probe_interval = 0, False, 0
    else:
        ctl.floor.probe_interval = 0
        ctl.verify.predicts_gain = lambda *a, **k: False
    return llm
res = {n: [] for n in engines}
for rep in range(4):
    order = list(engines) if rep % 2 == 0 else list(engines)[::-1]
    for n in order:
        run = common.serve(force(n), stream, B, toks, ignore_eos=True, temperature=temp)
        res[n].append(sum(map(len, run.outputs)) / run.cpu_s)
for n, v in res.items():
    print(n, [round(x, 1) for x in v], round(statistics.median(v) / statistics.median(res["plain"]), 3), flush=True)
for n in engines:
    pr = cProfile.Profile(); llm = force(n); pr.enable(); common.serve(llm, stream, B, 64, ignore_eos=True, temperature=temp); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14); print("=====", n); print(s.getvalue()[-3500:])
