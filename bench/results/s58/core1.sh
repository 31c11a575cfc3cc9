#!/bin/bash
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1
taskset -c 1 python bench/adaptive.py --interleave --k_max=5 --dtypes=float32 --num_prompts=4 --max_tokens=256 --ignore_eos --repeats=3 --temperature=0.8 --plot_dir= --configs=plain,mtp_k1,mtp_k2,mtp_step,dspark7_sync --batch_sizes=1,4 --sources=mixed,code --json_out=bench/results/s58/t08.json > bench/results/s58/t08.out 2> bench/results/s58/t08.err
taskset -c 1 python bench/adaptive.py --k_max=5 --dtypes=float32 --num_prompts=8 --max_tokens=256 --ignore_eos --repeats=3 --temperature=0 --plot_dir= --configs=plain,mtp_k1,mtp_k2,mtp_step,dspark7_sync --batch_sizes=4 --sources=staggered --json_out=bench/results/s58/stag.json > bench/results/s58/stag.out 2> bench/results/s58/stag.err
