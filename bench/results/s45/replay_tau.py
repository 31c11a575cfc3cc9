"""replay_conf.py's replay with another B = 1 table and a wider tau grid (stop 45)."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3])); sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench.results.s44.replay_conf as rc
from stop_aware import TABLES as tables, anchors, mixed_order
order = mixed_order(anchors(sys.argv[1]))
taus = (None, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
print("| table | best fixed k | " + " | ".join(f"tau {t or 'off'}" for t in taus) + " |")
for name, costs in tables.items():
    rc.COSTS[:] = costs
    fixed = {k: rc.replay(order, fixed=k) for k in range(1, 6)}
    kb = max(fixed, key=fixed.get); best = fixed[kb]
    print(f"| {name} | {kb} | " + " | ".join(f"{rc.replay(order, t) / best:.3f}" for t in taus) + " |")
