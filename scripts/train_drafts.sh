#!/usr/bin/env bash
# Rebuild the drafts shipped in adaspec/assets/drafts/ for the bundled SmolLM2-135M-Instruct (R-A5, R-B6).
#
# With a CUDA GPU (torch sees one) this is exactly what made the shipped drafts (docs/TRAINING.md,
# "On a GPU"): scripts/train_drafts_gpu.sh for 8 minutes, then resumed for 3 more. Without one, the
# same streaming recipe (issue 11) runs on two CPU cores for hours: the target answers thousands of
# training prompts (token ids only), and MTP and DSpark train together from the teacher's live signals
# over those answers and raw code/prose windows; generation and training run side by side, one core
# each. Both paths resume (rerun this script after an interruption and it continues). The learning
# curve is written to $OUT/{mtp,dspark}/curve.json; print and plot it with bench/draft_curve.py. Data
# and checkpoints go to runs/ (git-ignored), never into the package. When training ends the drafts
# are copied into adaspec/assets/drafts/ (SHIP=0 skips that, e.g. to compare first).
set -euo pipefail
cd "$(dirname "$0")/.."

TRAIN=${TRAIN:-"python -m adaspec.training.cli"}   # same as `adaspec train-draft`

if [ "${DEVICE:-auto}" != cpu ] && python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    OUT=${OUT:-runs/drafts_gpu}
    for minutes in 8 3; do   # the shipped drafts' two legs; the second resumes from runs/ckpt_gpu.pt
        MINUTES=$minutes OUT_DIR="$OUT" TRAIN="$TRAIN" scripts/train_drafts_gpu.sh
    done
else
    OUT=${OUT:-runs/drafts_new}
    FLAGS=(--kind=both --output="$OUT" --data_dir=runs/stream_data --checkpoint=runs/ckpt_both.pt --gen_tokens=256 --seed=0)
    # 1. the target's answers (bfloat16 teacher), up to 150 minutes in total, on core 0
    taskset -c 0 $TRAIN "${FLAGS[@]}" --stage=gen --gen_batch=96 --gen_minutes=150 &
    GEN=$!
    # 2. both drafts, 180 minutes of training, on core 1; answers are picked up as they are written
    taskset -c 1 $TRAIN "${FLAGS[@]}" --stage=train --gen_share=0.6 --max_minutes=180
    wait "$GEN" || true
fi

if [ "${SHIP:-1}" = 1 ]; then
    for kind in mtp dspark; do
        cp "$OUT/$kind/config.json" "$OUT/$kind/model.safetensors" "$OUT/$kind/curve.json" adaspec/assets/drafts/$kind/
        rm -f adaspec/assets/drafts/$kind/report.json   # the previous recipe's report (config.json holds the new one)
    done
fi
