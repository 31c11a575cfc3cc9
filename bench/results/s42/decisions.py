"""One run of the adaptive draft step (bench/adaptive.py's mtp_step engine, buckets 1 and 4) on the staggered or
mixed stream at B = 4, printing the priced tables and every decision record (stop 42).

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s42/decisions.py staggered [k_max]
"""
import sys, tempfile, collections
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from bench import adaptive, common
common.setup_threads(1); common.share_target_weights()
src = sys.argv[1] if len(sys.argv) > 1 else "staggered"
kmax = sys.argv[2] if len(sys.argv) > 2 else "5"
bargs = adaptive.parse_args(["--configs=mtp_step", "--batch_sizes=1,4", "--dtypes=float32", f"--sources={src}", "--num_prompts=4",
                             "--max_tokens=256", "--ignore_eos", f"--k_max={kmax}"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
llm = engines["mtp_step"]
prompts = common.prompt_sets(llm.tokenizer, [src], 4, bargs.prompt_tokens, bargs.chat_template)[src]
step = llm.engine.control.step
for b in (1,2,3,4):
    bc = step.pad_requests(b); t, m = step.costs.bucket(bc)
    print(b, bc, m, t and {k: round(v/t[0], 3) for k, v in step.costs.for_batch(b, bc, t).items()})
run = common.serve(llm, prompts, 4, 256, ignore_eos=True, arrival_gap_s=2.0 if src == "staggered" else 0.0)
print("cpu", run.cpu_s, dict(step.k_histogram))
for d in step.decisions:
    pr = {k: round(v, 4) for k, v in d.predicted.items()}
    op = {k: round(v, 4) for k, v in d.optimistic.items()}
    print(d.completed, "B", d.batch_size, d.previous_k, "->", d.k, d.reason[:60], "gain", d.gain and round(d.gain, 3), pr, op)
