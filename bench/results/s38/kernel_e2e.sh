#!/bin/bash
# Stop 38: a kernel change before (OLD tree: a checkout of the commit before it) and after (this tree), end to
# end, in alternating processes on one core (two rounds). Run from the repository root:
#   OLD=/path/to/checkout-at-previous-commit CORE=0 [BATCHES=1,4,8] [OUT_DIR=...] bash bench/results/s38/kernel_e2e.sh
set -e
OUT=${OUT_DIR:-bench/results/s38}
mkdir -p "$OUT"
ARGS="--configs=plain,mtp1,mtp2,dspark5 --batch_sizes=${BATCHES:-1,4,8} --dtypes=float32 --linear_backends=auto --sources=mixed --num_prompts=4 --max_tokens=128 --ignore_eos --repeats=1"
NEW=$(pwd)
for round in 1 2; do
  for side in old new; do
    dir=$NEW; [ $side = old ] && dir=$OLD
    (cd "$dir" && OMP_NUM_THREADS=1 taskset -c ${CORE:-0} python bench/speculative.py $ARGS --json_out "$NEW/$OUT/e2e_${side}_$round.json") > "$OUT/e2e_${side}_$round.log" 2>&1
    echo "$side round $round done $(date +%T)"
  done
done
