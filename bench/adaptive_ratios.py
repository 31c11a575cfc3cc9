"""Per cell and repeat ratios from bench/adaptive.py's stderr progress lines: every adaptive configuration over plain
and over the best of the fixed settings it is compared with, one markdown row per cell and configuration (the bench's
own report gives medians only). The experiment records' scripts (bench/results/s57/ratios_all.py,
bench/results/s59/ratios_family.py) say which fixed settings each configuration is compared with."""
from __future__ import annotations

import collections
import re
import statistics
from typing import Callable

LINE = re.compile(r"float32 B=(\d+) (\w+) rep (\d+) (\w+) .*= +([\d.]+) tok/s CPU(.*)")

# configuration -> None when it is itself a fixed setting, else which configurations are its fixed settings (plain is
# always one of them)
FixedOf = Callable[[str], "Callable[[str], bool] | None"]


def read_runs(path: str) -> dict:
    """(B, source, repeat) -> {configuration: (output tok/s by CPU clock, the rest of its progress line)}."""
    runs = collections.defaultdict(dict)
    for line in open(path, errors="replace").read().replace("\r", "\n").splitlines():
        m = LINE.search(line)
        if m:
            B, src, rep, cfg, tps, rest = m.groups()
            runs[(int(B), src, int(rep))][cfg] = (float(tps), rest.strip(", "))
    return runs


def table(path: str, fixed_of: FixedOf, best_header: str) -> str:
    cells = collections.defaultdict(lambda: collections.defaultdict(list))
    for (B, src, rep), d in sorted(read_runs(path).items()):
        if "plain" not in d:
            continue
        for c, (t, rest) in d.items():
            among = fixed_of(c)
            if among is None:
                continue
            fixed = {f: v[0] for f, v in d.items() if f == "plain" or among(f)}
            best = max(fixed, key=fixed.get)
            cells[(B, src)][c].append((t / d["plain"][0], t / fixed[best], best, rest))
    out = [f"| cell | mode | ÷ plain per repeat (median) | {best_header} | best fixed | choices (last repeat) |",
           "| --- | --- | --- | --- | --- | --- |"]
    for (B, src), modes in sorted(cells.items()):
        for c, rs in modes.items():
            p = [r[0] for r in rs]
            b = [r[1] for r in rs]
            ch = re.sub(r"acc\. length [\d.]+, ", "", rs[-1][3])
            out.append(f"| {src} B = {B} | {c} | {', '.join(f'{x:.3f}' for x in p)} (**{statistics.median(p):.3f}**) | "
                       f"{', '.join(f'{x:.3f}' for x in b)} (**{statistics.median(b):.3f}**) | "
                       f"{'/'.join(sorted(set(r[2] for r in rs)))} | {ch} |")
    return "\n".join(out)
