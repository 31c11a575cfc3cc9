#!/bin/bash
# issue 13: the draft step's failing cells (prose B = 8 / 16, chat B = 8) after the cold-probe change; core 1
cd "$(dirname "$0")/../../.." && . /work/venv/bin/activate
export OMP_NUM_THREADS=1
B="taskset -c 1 python bench/adaptive.py --isolate --k_max=3 --dtypes=float32 --num_prompts=4 --max_tokens=256 --ignore_eos --repeats=3 --plot_dir="
R=bench/results/s36
$B --configs=plain,mtp_k1,mtp_step --batch_sizes=8,16 --sources=prose,chat --json_out=$R/step_cells.json > $R/step_cells.log 2>&1
echo done > $R/step_cells.done
