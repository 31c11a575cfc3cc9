#!/bin/bash
# issue 13 / R-I3: temperature 0.8 on the mixed stream with the GPU-trained drafts (seeded per request, so
# every configuration's output is still compared with plain); core 1, fresh process per measurement
cd "$(dirname "$0")/../../.." && . /work/venv/bin/activate
export OMP_NUM_THREADS=1
B="taskset -c 1 python bench/adaptive.py --isolate --k_max=3 --dtypes=float32 --num_prompts=4 --max_tokens=256 --ignore_eos --repeats=3 --plot_dir= --temperature=0.8"
R=bench/results/s36
$B --configs=plain,mtp_k1,mtp_k2,mtp_step,dspark7_sync,dspark7_async --batch_sizes=1,4,16 --sources=mixed --json_out=$R/t08_mixed.json > $R/t08_mixed.log 2>&1
echo done > $R/t08.done
