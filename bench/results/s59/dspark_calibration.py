"""Stop 59: are the shipped DSpark draft's confidences calibrated in the engine? Full-width DSpark w = 7 rounds (every
draft verified) on held-out prompts at B = 1, greedy, 256 tokens: per position j, the mean path probability the draft
gave (product of its conditional confidences up to j, what the adaptive verify controllers rank and price) against
the share of rounds that accepted at least j drafts.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s59/dspark_calibration.py code,chat,prose
"""
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import common  # noqa: E402

W = 7
sources = (sys.argv[1] if len(sys.argv) > 1 else "code,chat,prose").split(",")
llm = common.build_llm("float32", "DSpark", W, None, max_seqs=1, max_model_len=1024)
ns = SimpleNamespace(sources=sources, num_prompts=4, batch_sizes=[1], prompt_tokens=192)
sets = common.warmed_prompt_sets({"dspark": llm}, ns)
rows = []
llm.engine.round_observers.append(lambda ev: rows.extend(
    (s, m) for s, m in zip(ev.result.draft_scores, ev.result.num_accepted) if len(s) == W))
print("| source | rounds | " + " | ".join(f"pos {j}: P / acc." for j in range(1, 5)) + " | E[accepted]: P / acc. |")
print("| --- | ---: | " + " | ".join("---" for _ in range(1, 5)) + " | --- |")
for src in sources:
    rows.clear()
    common.serve(llm, sets[src][:4], 1, 256, ignore_eos=True)
    P = np.cumprod(np.array([s for s, _ in rows]), axis=1)
    acc = np.array([m for _, m in rows])
    hit = np.stack([acc >= j for j in range(1, W + 1)], axis=1)
    cells = [f"{P[:, j].mean():.3f} / {hit[:, j].mean():.3f}" for j in range(4)]
    print(f"| {src} | {len(rows)} | " + " | ".join(cells) + f" | {P.sum(1).mean():.2f} / {acc.mean():.2f} |", flush=True)
