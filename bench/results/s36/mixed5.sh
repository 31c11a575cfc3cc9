#!/bin/bash
# issue 13: the mixed stream at B = 4, 8, 16, greedy, 5 repeats, core 1 with core 0 idle (end of stop 36)
cd "$(dirname "$0")/../../.." && . /work/venv/bin/activate
export OMP_NUM_THREADS=1
B="taskset -c 1 python bench/adaptive.py --isolate --k_max=3 --dtypes=float32 --num_prompts=4 --max_tokens=256 --ignore_eos --repeats=5 --plot_dir="
R=bench/results/s36
$B --configs=plain,mtp_k1,mtp_step,dspark7_sync,dspark7_async --batch_sizes=4,8,16 --sources=mixed --json_out=$R/mixed5.json > $R/mixed5.log 2>&1
