#!/usr/bin/env bash
# Stop 40: issue 13's cells not re-measured since the drafts changed (stop 39's note), paired as stop 37's
# paired_cells.sh (a fresh child per configuration and repeat, each serving plain and the configuration A B B A).
# Run from a checkout of the measured commit: CORE=1 OUT_DIR=... bash bench/results/s40/cells.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
S=bench/results/s37/paired_cells.sh
export CORE=${CORE:-1} OUT_DIR=${OUT_DIR:-bench/results/s40}
ALL=plain,mtp_k1,mtp_k2,mtp_step,dspark7_sync,dspark7_async
REPS=3 CONFIGS=$ALL bash $S "chat:4"
REPS=3 CONFIGS=$ALL bash $S "prose:8"
REPS=2 CONFIGS=plain,mtp_k1,mtp_step,dspark7_sync,dspark7_async bash $S "mixed:16"
REPS=3 CONFIGS=plain,mtp_k1,mtp_step,dspark7_sync,dspark7_async bash $S "staggered:4"
REPS=3 TEMP=0.8 CONFIGS=plain,mtp_k1,mtp_k2,mtp_step,dspark7_sync bash $S "code:1"
touch "$OUT_DIR/cells.done"
