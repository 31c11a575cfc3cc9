"""Table of kernel_e2e.sh's runs: median over rounds of tok/s (CPU clock), before / after, and each side's ratio to its plain.
Run: python bench/results/s38/e2e_table.py [DIR] (default: this folder)"""
import json, statistics, sys
from collections import defaultdict
from pathlib import Path

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
tok = defaultdict(list)
equal = defaultdict(list)
for side in ("old", "new"):
    for f in sorted(HERE.glob(f"e2e_{side}_*.json")):
        for r in json.loads(f.read_text())["results"]:
            key = (side, r["batch_size"], r["config"])
            tok[key].append(r["cpu_tok_s"])
            equal[key].append(r["equal_to_plain"]["equal"] == r["equal_to_plain"]["sequences"])
med = {k: statistics.median(v) for k, v in tok.items()}
print("| B | config | before tok/s | after tok/s | after ÷ before | before × plain | after × plain | = plain |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |")
for B in sorted({k[1] for k in med}):
    if ("old", B, "plain") not in med:
        continue
    for c in ("plain", "mtp1", "mtp2", "dspark5"):
        o, n = med[("old", B, c)], med[("new", B, c)]
        po, pn = med[("old", B, "plain")], med[("new", B, "plain")]
        eq = all(equal[("old", B, c)] + equal[("new", B, c)])
        print(f"| {B} | {c} | {o:.1f} | {n:.1f} | **{n / o:.2f}x** | {o / po:.2f}x | {n / pn:.2f}x | {'yes' if eq else 'NO'} |")
print(f"\n(rounds per side: {len(next(iter(tok.values())))})")
