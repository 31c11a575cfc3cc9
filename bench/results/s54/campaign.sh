#!/bin/bash
# the standard cell, N start-ups one after another on core 0 (core 1 idle)
cd "$(dirname "$0")/../../.."
for i in $(seq 1 $1); do
  OMP_NUM_THREADS=1 taskset -c 0 python bench/adaptive.py --interleave --k_max=5 --dtypes=float32 --num_prompts=4 --max_tokens=256 --ignore_eos --repeats=3 --temperature=0 --plot_dir= --configs=plain,mtp_k1,mtp_k2,mtp_step --batch_sizes=1 --sources=mixed --json_out=bench/results/s54/final_mixed$i.json > bench/results/s54/final_mixed$i.out 2>&1
  python bench/results/s52/final/per_rep.py bench/results/s54/final_mixed$i.json >> bench/results/s54/campaign.txt
done
