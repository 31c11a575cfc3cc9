"""Per repeat: the adaptive configuration's tok/s (CPU clock) over the best fixed configuration's (plain included)."""
import json, sys, statistics
for f in sys.argv[1:]:
    d = json.load(open(f))
    raw = {r["config"]: r["raw"] for r in d["results"]}
    ad = [c for c in raw if c.startswith("mtp_step")][0]
    n = len(raw[ad])
    rates = {c: [x["tokens"] / x["cpu_s"] for x in v] for c, v in raw.items()}
    ratios = [rates[ad][i] / max(rates[c][i] for c in rates if c != ad) for i in range(n)]
    print(f.split("/")[-1], ad, "÷ best fixed per repeat", [round(x, 3) for x in ratios], "median", round(statistics.median(ratios), 3))
