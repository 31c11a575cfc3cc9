#!/bin/bash
# issue 13: the adaptive-verify cells that missed a floor in stop 35's grid (mixed B = 4 / 16, chat B = 8,
# prose B = 4), after the capless-round and probe changes; core 1, fresh process per measurement
cd "$(dirname "$0")/../../.." && . /work/venv/bin/activate
export OMP_NUM_THREADS=1
B="taskset -c 1 python bench/adaptive.py --isolate --k_max=3 --dtypes=float32 --num_prompts=4 --max_tokens=256 --ignore_eos --repeats=3 --plot_dir="
R=bench/results/s36
$B --configs=plain,dspark7_sync,dspark7_async --batch_sizes=4,16 --sources=mixed --json_out=$R/floor_mixed.json > $R/floor_mixed.log 2>&1
$B --configs=plain,dspark7_sync,dspark7_async --batch_sizes=8 --sources=chat --json_out=$R/floor_chat.json > $R/floor_chat.log 2>&1
$B --configs=plain,dspark7_sync --batch_sizes=4 --sources=prose --json_out=$R/floor_prose.json > $R/floor_prose.log 2>&1
echo done > $R/floor_cells.done
