#!/usr/bin/env bash
# Rebuild the drafts shipped in adaspec/assets/drafts/ for the bundled SmolLM2-135M-Instruct (R-A5, R-B6).
#
# Three stages, each resumable (rerun this script after an interruption and it continues):
#   1. distil the target's greedy continuations + teacher signals into $DATA (shared by both drafts);
#   2. train the MTP draft;  3. train the DSpark draft (w=7, also serves w=5), calibrate its confidence.
# Budget on one CPU core: about 40 + 11 + 17 minutes. Run it pinned to one core, e.g.
#   taskset -c 1 scripts/train_drafts.sh
# Checkpoints go to runs/ (git-ignored), not into the shipped directories. See docs/TRAINING.md.
set -euo pipefail
cd "$(dirname "$0")/.."

TRAIN=${TRAIN:-"python -m adaspec.training.cli"}   # same as `adaspec train-draft`
DATA=${DATA:-runs/draft_data}
DATA_FLAGS=(--data_dir="$DATA" --num_prompts=900 --gen_tokens=192 --prompt_tokens=192 --raw_tokens=60000
            --topk=32 --gen_batch=48 --data_minutes=40 --seed=0 --threads=1)

# 1. data (the target, float32; shards are made in an order that mixes chat, code and prose, and
#    whatever is complete when the 40-minute budget is spent is the training set)
$TRAIN --kind=mtp --output=adaspec/assets/drafts/mtp "${DATA_FLAGS[@]}" --data_only

# 2. MTP: one decoder block, 8192-token head, trained unrolled over 3 steps
$TRAIN --kind=mtp --output=adaspec/assets/drafts/mtp --checkpoint=runs/ckpt_mtp.pt "${DATA_FLAGS[@]}" \
    --draft_vocab=8192 --unroll=3 --lr=1e-3 --batch_size=8 --seq_len=448 --max_minutes=10 --eval_k=5

# 3. DSpark: width 7, one backbone layer over target layers 9/19/29, Markov rank 128, confidence head + STS
$TRAIN --kind=dspark --output=adaspec/assets/drafts/dspark --checkpoint=runs/ckpt_dspark.pt "${DATA_FLAGS[@]}" \
    --draft_vocab=8192 --width=7 --layers=1 --rank=128 --anchor_frac=0.35 --lr=1e-3 --batch_size=8 \
    --seq_len=448 --max_minutes=15 --eval_k=5
