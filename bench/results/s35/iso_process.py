"""Fresh-process variance of one configuration (session 35): build ONE engine (plain, DSpark w = 7
adaptive verify sync/async, or the same forced never to draft: *_skip), serve one held-out stream and
print tokens/s and minor page faults. Run it several times per mode to see the spread between processes:

    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s35/iso_process.py MODE B TOKENS REPEATS [SOURCE]

MODE: plain | sync | async | sync_skip | async_skip; needs the table /tmp/k/tables3/dspark7_float32.json
(request buckets 4, 8, 16; write one with bench/adaptive.py --table_dir) -- edit the path to yours.
"""
import sys, argparse, statistics
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from bench import common
common.setup_threads(1)
mode, B, T, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
flags = dict(enable_adaptive_target_verify=True, graph_decode_batch_sizes=(4, 8, 16),
             adaptive_target_verify_cost_table="/tmp/k/tables3/dspark7_float32.json")
if mode == "plain":
    llm = common.build_llm("float32", "none", None, None, max_seqs=16, max_model_len=512)
else:
    if mode.startswith("async"):
        flags["enable_schedule_overlap"] = True
    llm = common.build_llm("float32", "DSpark", 7, None, max_seqs=16, max_model_len=512, **flags)
src = sys.argv[5] if len(sys.argv) > 5 else "mixed"
args = argparse.Namespace(num_prompts=max(B, 4), batch_sizes=[B], sources=[src], prompt_tokens=192, chat_template="auto")
sets = common.warmed_prompt_sets({"x": llm}, args)
ts = []
for rep in range(reps):
    ctl = llm.engine.control
    if ctl is not None:
        ctl.reset()
        if mode.endswith("skip"):
            ctl.floor.decide = lambda gain, *a: "skip"  # (decide also takes can_verify since stop 36)
    import resource
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    r = common.serve(llm, sets[src], B, T, True)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    ts.append(r.cpu_s); print("faults", faults)
print("RESULT", mode, B, [round(t, 3) for t in ts], round(sum(B * [T]) / statistics.median(ts), 1), "tok/s")
