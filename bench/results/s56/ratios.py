"""Per repeat mtp_step / plain and / best fixed from bench/adaptive.py's progress lines (stderr). usage: ratios.py ERR"""
import re, sys, collections
runs = collections.defaultdict(dict)
for line in open(sys.argv[1], errors="replace").read().replace("\r", "\n").splitlines():
    m = re.search(r"float32 B=(\d+) (\w+) rep (\d+) (\w+) .*= +([\d.]+) tok/s CPU(.*)", line)
    if m:
        B, src, rep, cfg, tps, rest = m.groups()
        runs[(int(B), src, int(rep))][cfg] = (float(tps), rest.strip())
cells = collections.defaultdict(list)
for (B, src, rep), d in sorted(runs.items()):
    if "mtp_step" not in d or "plain" not in d:
        continue
    fixed = {c: v[0] for c, v in d.items() if c != "mtp_step"}
    best = max(fixed, key=fixed.get)
    s = d["mtp_step"][0]
    cells[(B, src)].append((s / d["plain"][0], s / fixed[best], best, d["mtp_step"][1]))
for (B, src), rs in cells.items():
    print(f"B={B} {src:6s} /plain {[round(r[0], 3) for r in rs]}  /best {[round(r[1], 3) for r in rs]} best {[r[2] for r in rs]}")
    for r in rs:
        print("     ", r[3][:110])
