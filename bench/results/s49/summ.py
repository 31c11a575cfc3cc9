"""Per process and repeat: adaptive / best fixed (same repeat) from interleaved bench logs. argv: log files"""
import re, sys, statistics
from collections import defaultdict
allr = defaultdict(list)
for f in sys.argv[1:]:
    reps = defaultdict(dict); chosen = defaultdict(list)
    for line in open(f):
        m = re.search(r"rep (\d+) (\S+)\s+\d+ tok .*= +([\d.]+) tok/s CPU(.*)", line)
        if m:
            reps[int(m.group(1))][m.group(2)] = float(m.group(3))
            c = re.search(r", (k|G) ([^,]+), controller", m.group(4))
            if c: chosen[m.group(2)].append(c.group(2))
    out = []
    for r, d in sorted(reps.items()):
        fixed = {n: v for n, v in d.items() if n == "plain" or n.startswith("mtp_k") or n.endswith("_full")}
        best = max(fixed, key=fixed.get)
        for a in d:
            if a.endswith(("_step", "_sync", "_async", "_alt")):
                x = d[a] / fixed[best]; allr[a].append(x)
                out.append(f"{a}/{best}={x:.3f} (x plain {d[a]/d['plain']:.3f})")
    print(f.split('/')[-2] + '/' + f.split('/')[-1], "; ".join(out), dict(chosen))
for a, v in allr.items():
    print(a, "n", len(v), "median", f"{statistics.median(v):.3f}", "min", f"{min(v):.3f}")
