#!/usr/bin/env bash
# call 2 on the GPU machine: the whole target, then scripts/train_drafts_gpu.sh into $OUT
set -o pipefail
cat /tmp/m/m.part1 .dev/b/m.part2 > /tmp/m/model.gguf && sha256sum /tmp/m/model.gguf
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 ADASPEC_CACHE_DIR=/tmp/cache TQDM_MININTERVAL=30 TOKENIZERS_PARALLELISM=true
MODEL=/tmp/m/model.gguf OUT_DIR=$OUT/drafts LOG_DIR=$OUT DATA_DIR=/tmp/data CKPT=/tmp/ckpt.pt MINUTES=${MINUTES:-8} \
    bash scripts/train_drafts_gpu.sh
nvidia-smi --query-gpu=memory.used --format=csv
ls -la $OUT $OUT/drafts/*
