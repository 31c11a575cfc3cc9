"""DSpark at B=1 on a source: the confidence head's path probabilities vs realised acceptance (fixed full width),
per position and by bins of the path probability. usage: dspark_diag.py <checkout> SOURCE"""
import sys, tempfile, json, collections
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import numpy as np
from bench import adaptive, common, adaptive_interleaved as il
src = sys.argv[2]
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,dspark7_full", "--batch_sizes=1", "--dtypes=float32",
                             f"--sources={src}", "--num_prompts=4", "--max_tokens=256", "--ignore_eos",
                             "--temperature=0", "--k_max=5", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
rows = []
def obs(ev):
    r = ev.result
    for s, L, m in zip(r.draft_scores, r.verify_lens, r.num_accepted):
        if s:
            rows.append((list(s), L, m))
engines["dspark7_full"].engine.round_observers.append(obs)
runs = il.serve_interleaved(engines, sets[src][:4], 1, 256, True, 0.0)
print({n: round(x.tokens / x.cpu_s, 1) for n, x in runs.items()})
from adaspec.adaptive.scoring import path_probabilities
S = np.array([s for s, _, _ in rows]); P = path_probabilities(S)
L = np.array([l for _, l, _ in rows]); M = np.array([m for _, _, m in rows])
print("rounds", len(rows), "mean verify len", L.mean(), "mean accepted", M.mean())
for j in range(P.shape[1]):
    reached = (L > j)
    acc = (M > j)
    print(f"pos {j+1}: mean path P {P[reached, j].mean():.3f}  realised P(accepted through j) {acc[reached].mean():.3f}  n {reached.sum()}")
# calibration by bins of path P at position 1..3
for j in range(3):
    p = P[:, j]; a = (M > j)
    bins = np.linspace(0, 1, 6)
    idx = np.digitize(p, bins) - 1
    print(f"pos {j+1} bins:", [(f"{bins[b]:.1f}", int((idx == b).sum()), round(float(a[idx == b].mean()), 2) if (idx == b).any() else None) for b in range(5)])
json.dump({"S": S.tolist(), "L": L.tolist(), "M": M.tolist()}, open(f"dspark_scores_{src}.json", "w"))
