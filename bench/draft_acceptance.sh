#!/usr/bin/env bash
# Engine-measured acceptance of two drafts (issue 11): `adaspec generate --json` stats, width 5,
# greedy, 96 tokens, fp32, on 12 held-out human-eval prompts (raw text) and 20 held-out chat prompts
# (chat template). usage: bench/draft_acceptance.sh MTP_DIR DSPARK_DIR LABEL
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
python - "$dir" <<'PY'
import json, sys
from adaspec.training.corpus import heldout_prompts
for src, n in (("code", 12), ("chat", 20)):
    with open(f"{sys.argv[1]}/{src}.jsonl", "w") as f:
        for t in heldout_prompts(src, n):
            f.write(json.dumps({"prompt": t.text, "id": t.id}) + "\n")
PY
for kind in MTP DSpark; do
  draft=$([ $kind = MTP ] && echo "$1" || echo "$2")
  for src in code chat; do
    chat=$([ $src = chat ] && echo true || echo false)
    taskset -c 0 python -m adaspec.cli generate --prompts_file="$dir/$src.jsonl" --chat=$chat --max_tokens=96 \
      --speculative_algorithm=$kind --num_speculative_tokens=5 --draft_model="$draft" --linear_backend=fp32 \
      --max_seqs_per_batch=8 --json 2>/dev/null | python -c "
import json, sys; s = json.load(sys.stdin)['stats']
print('$3', '$kind', '$src', 'mean_acceptance_length', s['mean_acceptance_length'], 'per_position', s['per_position_acceptance'])"
  done
done
