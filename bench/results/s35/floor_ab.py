"""The plain floor's cost in one process (session 35): plain vs DSpark w = 7 adaptive verify, sync
and async, on the held-out mixed stream, at one batch size, alternating order, medians of process CPU
time. Run it once per checkout to compare two commits (the ratios are each run's own):

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s35/floor_ab.py REPO B TOKENS REPEATS COST_TABLE [SOURCE]

REPO: the checkout to import adaspec and bench from; COST_TABLE: a DSpark w = 7 float32 table with
request buckets 4, 8, 16 (e.g. written by bench/adaptive.py --table_dir); SOURCE: mixed (default),
code, chat or prose.
"""
import sys, argparse, statistics
repo = sys.argv[1]
sys.path.insert(0, repo)
from bench import common
import adaspec; assert adaspec.__file__.startswith(repo), adaspec.__file__
common.setup_threads(1)
common.share_target_weights()
B = int(sys.argv[2]); T = int(sys.argv[3]); reps = int(sys.argv[4]); table = sys.argv[5]
source = sys.argv[6] if len(sys.argv) > 6 else "mixed"
plain = common.build_llm("float32", "none", None, None, max_seqs=16, max_model_len=512)
flags = dict(enable_adaptive_target_verify=True, graph_decode_batch_sizes=(4, 8, 16), adaptive_target_verify_cost_table=table)
sync = common.build_llm("float32", "DSpark", 7, None, max_seqs=16, max_model_len=512, **flags)
asyn = common.build_llm("float32", "DSpark", 7, None, max_seqs=16, max_model_len=512, enable_schedule_overlap=True, **flags)
engines = {"plain": plain, "sync": sync, "async": asyn}
args = argparse.Namespace(num_prompts=max(B, 4), batch_sizes=[B], sources=[source], prompt_tokens=192, chat_template="auto")
sets = common.warmed_prompt_sets(engines, args)
res = {k: [] for k in engines}
for rep in range(reps):
    order = list(engines) if rep % 2 == 0 else list(engines)[::-1]
    for name in order:
        llm = engines[name]
        if llm.engine.control is not None:
            llm.engine.control.reset()
        r = common.serve(llm, sets[source], B, T, True)
        res[name].append(r.cpu_s)
        if llm.engine.control is not None and rep == 0:
            print(name, llm.engine.control.summary(), flush=True)
med = {k: statistics.median(v) for k, v in res.items()}
print(repo, source, "B", B, {k: [round(x, 3) for x in sorted(v)] for k, v in res.items()})
print(repo, source, "B", B, "x plain:", {k: round(med["plain"] / v, 4) for k, v in med.items()})
