#!/usr/bin/env bash
# Engine-measured acceptance of two drafts (issue 11): `adaspec generate --json` stats, width 5,
# greedy, 96 tokens, fp32, on held-out human-eval prompts (raw text), held-out standard-library
# passages (raw text) and held-out chat prompts (chat template), each set measured on its own.
# usage: bench/draft_acceptance.sh MTP_DIR DSPARK_DIR LABEL
# env: N_CODE human-eval prompts (default 12, at most 33), N_STDLIB stdlib passages (default 0),
#      N_CHAT chat prompts (default 20, at most 40), CORE the core to pin to (default 0)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
N_CODE=${N_CODE:-12} N_STDLIB=${N_STDLIB:-0} N_CHAT=${N_CHAT:-20} CORE=${CORE:-0}
sources="code chat"
[ "$N_STDLIB" -gt 0 ] && sources="code stdlib chat"
python - "$dir" "$N_CODE" "$N_STDLIB" "$N_CHAT" <<'PY'
import json, sys
from adaspec.training.corpus import heldout_prompts
out, n_code, n_stdlib, n_chat = sys.argv[1], *map(int, sys.argv[2:])
human_eval = len(heldout_prompts("code"))  # the held-out human-eval prompts come first, then stdlib passages
sets = {"code": heldout_prompts("code", min(n_code, human_eval)), "chat": heldout_prompts("chat", n_chat),
        "stdlib": heldout_prompts("code", human_eval + n_stdlib)[human_eval:]}
for src, items in sets.items():
    with open(f"{out}/{src}.jsonl", "w") as f:
        for t in items:
            f.write(json.dumps({"prompt": t.text, "id": t.id}) + "\n")
    print(f"# {src}: {len(items)} held-out prompts", file=sys.stderr)
PY
for kind in MTP DSpark; do
  draft=$([ $kind = MTP ] && echo "$1" || echo "$2")
  for src in $sources; do
    chat=$([ $src = chat ] && echo true || echo false)
    taskset -c "$CORE" python -m adaspec.cli generate --prompts_file="$dir/$src.jsonl" --chat=$chat --max_tokens=96 \
      --speculative_algorithm=$kind --num_speculative_tokens=5 --draft_model="$draft" --linear_backend=fp32 \
      --max_seqs_per_batch=8 --json 2>/dev/null | python -c "
import json, sys; s = json.load(sys.stdin)['stats']
print('$3', '$kind', '$src', 'mean_acceptance_length', s['mean_acceptance_length'], 'per_position', s['per_position_acceptance'])"
  done
done
