#!/usr/bin/env bash
# Issue 11 on one CUDA GPU: the shipped drafts' streaming recipe (scripts/train_drafts.sh) scaled to
# what a GPU does in minutes, inside one wall-clock budget (docs/TRAINING.md, "On a GPU").
#
# The target answers ~10k training prompts (bfloat16, 1024 at a time) in the background while MTP and
# DSpark train together in the foreground on the same GPU, from the teacher's live signals over those
# answers and ~30M tokens of raw code and prose windows. The train stage stops in time to evaluate and
# save the drafts within MINUTES (set-up and evaluations included); the learning curve is measured at
# CURVE_POINTS distinct positions. Everything resumes: rerun with the same paths to continue.
#
#   MINUTES=8 OUT_DIR=runs/drafts_gpu scripts/train_drafts_gpu.sh
#   MODEL=/path/model.gguf ...        # another copy of the target (default: the bundled SmolLM2)
# Data and the checkpoint go to DATA_DIR and CKPT (never into the package); the drafts and their
# curve.json go to OUT_DIR/{mtp,dspark}, the two logs to LOG_DIR. Copy OUT_DIR/{mtp,dspark}/* into
# adaspec/assets/drafts/ to ship them. The sizes below are environment variables (DEVICE=cpu and
# small sizes make a dry run of the script itself, tests/unit/test_train_drafts_gpu_script.py).
set -euo pipefail
cd "$(dirname "$0")/.."

TRAIN=${TRAIN:-"python3 -m adaspec.training.cli"}   # same as `adaspec train-draft`
OUT_DIR=${OUT_DIR:-runs/drafts_gpu}
DATA_DIR=${DATA_DIR:-runs/stream_data_gpu}
CKPT=${CKPT:-runs/ckpt_gpu.pt}
LOG_DIR=${LOG_DIR:-runs}
MINUTES=${MINUTES:-8}
DEVICE=${DEVICE:-cuda}
CHAT_PROMPTS=${CHAT_PROMPTS:-6000} CODE_PROMPTS=${CODE_PROMPTS:-3000} PROSE_PROMPTS=${PROSE_PROMPTS:-1000}
CODE_TOKENS=${CODE_TOKENS:-30000000} PROSE_TOKENS=${PROSE_TOKENS:-3000000}
GEN_TOKENS=${GEN_TOKENS:-256} GEN_BATCH=${GEN_BATCH:-1024} BATCH_TOKENS=${BATCH_TOKENS:-32768} SEQ_LEN=${SEQ_LEN:-512}
EXTRA=(${EXTRA:-})   # further flags for both stages (the tiny dry run's model sizes)
CURVE_POINTS=${CURVE_POINTS:-0,1000000,4000000,10000000,25000000,60000000,150000000}
mkdir -p "$LOG_DIR"

FLAGS=(--kind=both --device="$DEVICE" --output="$OUT_DIR" --data_dir="$DATA_DIR" --checkpoint="$CKPT" --seed=0
       --gen_tokens="$GEN_TOKENS" --chat_prompts="$CHAT_PROMPTS" --code_prompts="$CODE_PROMPTS"
       --prose_prompts="$PROSE_PROMPTS" --code_tokens="$CODE_TOKENS" --prose_tokens="$PROSE_TOKENS"
       --seq_len="$SEQ_LEN" "${EXTRA[@]}")
if [ -n "${MODEL:-}" ]; then FLAGS+=(--model="$MODEL"); fi

# the answers: at most 45% of the budget (checked between chunks of 1024 prompts), then training reads
# the ones written; killed at the budget's end if a chunk runs over
GEN_MINUTES=$(python3 -c "print(round($MINUTES * 0.45, 2))")
timeout "$(python3 -c "print(int($MINUTES * 60))")" $TRAIN "${FLAGS[@]}" --stage=gen --gen_batch="$GEN_BATCH" \
    --gen_minutes="$GEN_MINUTES" >"$LOG_DIR/gen.log" 2>&1 &
GEN=$!

# both drafts: ~32k tokens per step (64 windows of 512), answers read up to 6 times while they are few
set +e
$TRAIN "${FLAGS[@]}" --stage=train --batch_tokens="$BATCH_TOKENS" --gen_share=0.5 --gen_repeats=6 \
    --lr=1e-3 --positions=1000000000 --max_minutes=100000 --ckpt_minutes=3 \
    --wall_minutes="$(python3 -c "print(round($MINUTES - 0.25, 2))")" --curve_points="$CURVE_POINTS" \
    2>&1 | tee "$LOG_DIR/train.log"
STATUS=${PIPESTATUS[0]}
set -e
kill "$GEN" 2>/dev/null || true
wait "$GEN" 2>/dev/null || true
echo "train stage exit status $STATUS; drafts in $OUT_DIR/{mtp,dspark}"
exit "$STATUS"
