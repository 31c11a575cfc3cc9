"""Per cell and repeat: every adaptive config / plain and / the best fixed setting of its family (MTP fixed k for
mtp_step; DSpark has no fixed config in the run, so plain and MTP for dspark7_sync), from bench/adaptive.py's stderr.
usage: ratios_all.py ERR"""
import re, sys, collections, statistics
runs = collections.defaultdict(dict)
for line in open(sys.argv[1], errors="replace").read().replace("\r", "\n").splitlines():
    m = re.search(r"float32 B=(\d+) (\w+) rep (\d+) (\w+) .*= +([\d.]+) tok/s CPU(.*)", line)
    if m:
        B, src, rep, cfg, tps, rest = m.groups()
        runs[(int(B), src, int(rep))][cfg] = (float(tps), rest.strip(", "))
cells = collections.defaultdict(lambda: collections.defaultdict(list))
for (B, src, rep), d in sorted(runs.items()):
    if "plain" not in d:
        continue
    fixed = {c: v[0] for c, v in d.items() if c == "plain" or c.startswith("mtp_k")}
    best = max(fixed, key=fixed.get)
    for c, (t, rest) in d.items():
        if c in fixed:
            continue
        cells[(B, src)][c].append((t / d["plain"][0], t / fixed[best], best, rest))
print("| cell | mode | ÷ plain per repeat (median) | ÷ best fixed per repeat (median) | best fixed | choices (last repeat) |")
print("| --- | --- | --- | --- | --- | --- |")
for (B, src), modes in sorted(cells.items()):
    for c, rs in modes.items():
        p = [r[0] for r in rs]; b = [r[1] for r in rs]
        ch = re.sub(r"acc\. length [\d.]+, ", "", rs[-1][3])
        print(f"| {src} B = {B} | {c} | {', '.join(f'{x:.3f}' for x in p)} (**{statistics.median(p):.3f}**) | "
              f"{', '.join(f'{x:.3f}' for x in b)} (**{statistics.median(b):.3f}**) | {'/'.join(sorted(set(r[2] for r in rs)))} | {ch} |")
