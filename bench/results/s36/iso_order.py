"""Does building an adaptive-verify engine in a process slow that process's *plain* engine? (stop 36)

Fresh-process cells put DSpark's plain-floor cells 2-5% under plain while in one process they match.
MODE: plain (one plain engine), dspark_skip (DSpark sync w = 7, forced never to draft), plain_after
(a DSpark sync engine is built first, then a plain engine, which is measured). One process per call;
run each mode several times, alternating:

    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s36/iso_order.py MODE B TOKENS REPEATS TABLE [SOURCE]

TABLE: a DSpark w = 7 float32 cost table covering B (bench/adaptive.py --table_dir writes one).
"""
import argparse
import statistics
import sys

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from bench import common  # noqa: E402

common.setup_threads(1)
mode, B, T, reps, table = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
src = sys.argv[6] if len(sys.argv) > 6 else "mixed"
flags = dict(enable_adaptive_target_verify=True, graph_decode_batch_sizes=(B,), adaptive_target_verify_cost_table=table)
keep = []
if mode in ("dspark_skip", "plain_after"):
    keep.append(common.build_llm("float32", "DSpark", 7, None, max_seqs=16, max_model_len=512, **flags))
llm = keep[0] if mode == "dspark_skip" else common.build_llm("float32", "none", None, None, max_seqs=16, max_model_len=512)
args = argparse.Namespace(num_prompts=max(B, 4), batch_sizes=[B], sources=[src], prompt_tokens=192, chat_template="auto")
sets = common.warmed_prompt_sets({"x": llm}, args)
ts = []
for rep in range(reps):
    ctl = llm.engine.control
    if ctl is not None:
        ctl.reset()
        ctl.floor.decide = lambda gain, *a: "skip"
    r = common.serve(llm, sets[src][: max(B, 4)], B, T, True)
    ts.append(r.cpu_s)
print("RESULT", mode, B, [round(t, 3) for t in ts], round(B * T / statistics.median(ts), 1), "tok/s", flush=True)
