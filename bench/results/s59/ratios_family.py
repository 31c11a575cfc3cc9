"""Per cell and repeat: every adaptive configuration over plain and over the best fixed setting of its own family plus
plain (mtp_step: fixed MTP k; hyb_step: fixed MTP+Suffix k; dspark7_*: DSpark's fixed verify lengths L and full
width; mtp5_*: MTP w = 5's), from bench/adaptive.py's stderr (stop 59: the fixed verify lengths run interleaved).
usage: ratios_family.py ERR"""
import collections
import re
import statistics
import sys

FAMILY = {"mtp_step": re.compile(r"mtp_k\d+$"), "hyb_step": re.compile(r"hyb_k\d+$"),
          "dspark7": re.compile(r"dspark7_(L\d+|full)$"), "mtp5": re.compile(r"(mtp5_L\d+|mtp_k5)$")}


def family(cfg):
    if cfg.startswith(("mtp_step", "hyb_step")):
        return cfg[:8]
    return cfg.partition("_")[0]


def is_fixed(cfg):
    return cfg == "plain" or any(p.match(cfg) for p in FAMILY.values())


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
    for c, (t, rest) in d.items():
        if is_fixed(c):
            continue
        pat = FAMILY[family(c)]
        fixed = {f: v[0] for f, v in d.items() if f == "plain" or pat.match(f)}
        best = max(fixed, key=fixed.get)
        cells[(B, src)][c].append((t / d["plain"][0], t / fixed[best], best, rest))
print("| cell | mode | ÷ plain per repeat (median) | ÷ best fixed of its family per repeat (median) | best fixed | "
      "choices (last repeat) |")
print("| --- | --- | --- | --- | --- | --- |")
for (B, src), modes in sorted(cells.items()):
    for c, rs in modes.items():
        p = [r[0] for r in rs]
        b = [r[1] for r in rs]
        ch = re.sub(r"acc\. length [\d.]+, ", "", rs[-1][3])
        print(f"| {src} B = {B} | {c} | {', '.join(f'{x:.3f}' for x in p)} (**{statistics.median(p):.3f}**) | "
              f"{', '.join(f'{x:.3f}' for x in b)} (**{statistics.median(b):.3f}**) | "
              f"{'/'.join(sorted(set(r[2] for r in rs)))} | {ch} |")
