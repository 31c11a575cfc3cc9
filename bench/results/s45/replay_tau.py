"""replay_conf.py's replay with another B = 1 table and a wider tau grid (stop 45)."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3])); sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench.results.s44.replay_conf as rc
from bench.step_policies import held_out_anchors
tables = {"zen2 (s44)": [25.59, 27.24, 30.25, 34.91, 38.05, 41.92],
          "zen5 a": [18.0, 19.88, 23.25, 28.87, 30.42, 33.87],
          "zen5 b": [14.46, 16.78, 20.27, 25.07, 29.03, 30.84]}
seqs = held_out_anchors(Path(sys.argv[1]), None, 5)
by = {s: [x for x in seqs if x[0] == s] for s in ("code", "chat", "prose")}
order = [by[s][i] for i in range(max(map(len, by.values()))) for s in by if i < len(by[s])]
taus = (None, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
print("| table | best fixed k | " + " | ".join(f"tau {t or 'off'}" for t in taus) + " |")
for name, costs in tables.items():
    rc.COSTS[:] = costs
    fixed = {k: rc.replay(order, fixed=k) for k in range(1, 6)}
    kb = max(fixed, key=fixed.get); best = fixed[kb]
    print(f"| {name} | {kb} | " + " | ".join(f"{rc.replay(order, t) / best:.3f}" for t in taus) + " |")
