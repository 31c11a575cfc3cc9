#!/usr/bin/env bash
# Stop 41: issue 13's cells on the draft step's interpolated pricing and exploration backoff (93c5b33), paired
# as stop 37's paired_cells.sh. Run from a checkout of the measured commit:
#   CORE=1 OUT_DIR=... bash bench/results/s41/cells.sh core1     (B = 4 and 8 cells)
#   CORE=0 OUT_DIR=... bash bench/results/s41/cells.sh core0     (B = 1 and 16 cells, after the stop's DSpark runs)
set -euo pipefail
cd "$(dirname "$0")/../../.."
S=bench/results/s37/paired_cells.sh
export CORE=${CORE:-1} OUT_DIR=${OUT_DIR:-bench/results/s41/cells}
case "$1" in
core1)
    REPS=5 CONFIGS=plain,mtp_k1,mtp_step bash $S "mixed:4"
    REPS=5 CONFIGS=plain,mtp_step bash $S "chat:4"
    REPS=3 CONFIGS=plain,mtp_k1,mtp_step bash $S "staggered:4"
    REPS=3 CONFIGS=plain,mtp_k1,mtp_step bash $S "prose:8" ;;
core0)
    REPS=3 KMAX=5 CONFIGS=plain,mtp_k2,mtp_step bash $S "mixed:1"
    REPS=3 TEMP=0.8 CONFIGS=plain,mtp_k1,mtp_step bash $S "code:1"
    REPS=3 CONFIGS=plain,mtp_step bash $S "mixed:16" ;;
esac
touch "$OUT_DIR/$1.done"
