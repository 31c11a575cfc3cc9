#!/usr/bin/env bash
# Issue 13's floor cells with bench/adaptive.py --isolate --paired (stop 37): every child builds plain and one
# configuration, serves A B B A; REPS children per configuration and cell. fp32, one thread, greedy unless
# TEMP is set, 256 tokens. Usage: CORE=0 REPS=4 bash bench/results/s37/paired_cells.sh "mixed:4 mixed:8 chat:8"
set -euo pipefail
cd "$(dirname "$0")/../../.."
CORE=${CORE:-1}; REPS=${REPS:-4}; TEMP=${TEMP:-0}; KMAX=${KMAX:-3}  # KMAX: --k_max (stop 40)
CONFIGS=${CONFIGS:-plain,mtp_k1,mtp_step,dspark7_sync,dspark7_async}
ALT=${ALT:-"{}"}  # --alt_step_policy for the mtp_step_alt configuration (stop 43)
OUT=${OUT_DIR:-bench/results/s37}
for cell in $1; do
    src=${cell%%:*}; B=${cell##*:}
    tag="${src}_b${B}_t${TEMP}$([ "$KMAX" = 3 ] || echo "_k$KMAX")"
    OMP_NUM_THREADS=1 taskset -c "$CORE" python bench/adaptive.py --isolate --paired --k_max="$KMAX" --dtypes=float32 \
        --num_prompts=4 --max_tokens=256 --ignore_eos --repeats="$REPS" --temperature="$TEMP" --plot_dir= --alt_step_policy="$ALT" \
        --configs="$CONFIGS" --batch_sizes="$B" --sources="$src" --json_out="$OUT/paired_${tag}.json" \
        > "$OUT/paired_${tag}.md" 2> "$OUT/paired_${tag}.log"
done
