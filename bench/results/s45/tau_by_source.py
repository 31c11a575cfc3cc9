"""Replay (stop 45): best confidence-stop threshold per stream, fixed ceiling 5 and the engine's controller."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3])); sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench.results.s44.replay_conf as rc
from stop_aware import TABLES, anchors
seqs = anchors(sys.argv[1])
taus = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
for name in ("zen2", "zen5a"):
    rc.COSTS[:] = TABLES[name]
    for src in ("code", "chat", "prose"):
        order = [x for x in seqs if x[0] == src]
        best = max(rc.replay(order, fixed=k) for k in range(1, 6))
        ctl = [rc.replay(order, t) / best for t in taus]
        k5 = [rc.replay(order, t, fixed=5) / best for t in taus]
        print(f"{name} {src:5s} ctl: " + " ".join(f"{x:.3f}" for x in ctl) + " | k5: " + " ".join(f"{x:.3f}" for x in k5))
