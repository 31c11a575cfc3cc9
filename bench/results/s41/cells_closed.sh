#!/usr/bin/env bash
# Stop 41: issue 13's B >= 4 cells on the closed-batch draft step (78aea5b), paired as stop 37's paired_cells.sh.
# Run from a checkout of the measured commit:
#   CORE=1 OUT_DIR=... bash bench/results/s41/cells_closed.sh core1
#   CORE=0 OUT_DIR=... bash bench/results/s41/cells_closed.sh core0
set -euo pipefail
cd "$(dirname "$0")/../../.."
S=bench/results/s37/paired_cells.sh
export CORE=${CORE:-1} OUT_DIR=${OUT_DIR:-bench/results/s41/closed}
case "$1" in
core1)
    REPS=3 CONFIGS=plain,mtp_k1,mtp_step bash $S "staggered:4"
    REPS=5 CONFIGS=plain,mtp_k1,mtp_step bash $S "mixed:4"
    REPS=3 CONFIGS=plain,mtp_k1,mtp_step bash $S "prose:8" ;;
core0)
    REPS=5 CONFIGS=plain,mtp_step bash $S "chat:4"
    REPS=2 CONFIGS=plain,mtp_step bash $S "mixed:16"
    REPS=3 TEMP=0.8 CONFIGS=plain,mtp_k1,mtp_step bash $S "code:1" ;;
esac
touch "$OUT_DIR/$1.done"
