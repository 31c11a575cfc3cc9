#!/bin/bash
# issue 13 grid with the GPU-trained drafts, after 40ba28c (subset probes); core 1, fresh process per measurement
cd "$(dirname "$0")/../../.." && . /work/venv/bin/activate
export OMP_NUM_THREADS=1
B="taskset -c 1 python bench/adaptive.py --isolate --k_max=3 --dtypes=float32 --num_prompts=4 --max_tokens=256 --ignore_eos --repeats=3 --plot_dir="
R=bench/results/s35
$B --configs=plain,dspark7_sync,dspark7_async --batch_sizes=1,4,8,16 --sources=mixed --json_out=$R/mixed_dspark.json > $R/mixed_dspark.log 2>&1
$B --configs=plain,mtp_k1,mtp_step,dspark7_sync,dspark7_async --batch_sizes=4,8,16 --sources=code,chat,prose,staggered --json_out=$R/streams_b4_b16.json > $R/streams_b4_b16.log 2>&1
$B --configs=plain,mtp_k1,mtp_k2,mtp_k3,mtp_step,dspark7_sync,dspark7_async --batch_sizes=1 --sources=code,chat,prose,staggered --json_out=$R/streams_b1.json > $R/streams_b1.log 2>&1
echo done > $R/grid.done
# What ran (the grid above was stopped after its second command, for time): the B = 1 cells on both
# cores in parallel, each the other's competing load (a fresh process per measurement, as above):
#   taskset -c 0 ... --configs=plain,mtp_k1,mtp_k2,mtp_k3,mtp_step,dspark7_sync,dspark7_async --batch_sizes=1 \
#       --sources=code,chat --json_out=$R/streams_b1_code_chat.json
#   taskset -c 1 ... (same) --sources=prose,staggered --json_out=$R/streams_b1_prose_staggered.json
