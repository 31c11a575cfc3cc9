"""Per repeat: mtp_step and mtp_step_alt over the best fixed configuration (plain included), and step over alt (CPU clock)."""
import json, sys, statistics
for f in sys.argv[1:]:
    d = json.load(open(f))
    raw = {r["config"]: r["raw"] for r in d["results"]}
    rates = {c: [x["tokens"] / x["cpu_s"] for x in v] for c, v in raw.items()}
    fx = [c for c in rates if not c.startswith("mtp_step")]
    rows = []
    for i in range(len(rates["mtp_step"])):
        best = max(rates[c][i] for c in fx)
        rows.append((rates["mtp_step"][i] / best, rates["mtp_step_alt"][i] / best, rates["mtp_step"][i] / rates["mtp_step_alt"][i]))
    print(f.split("/")[-1], "step/best", [round(r[0], 3) for r in rows], "alt/best", [round(r[1], 3) for r in rows],
          "step/alt", [round(r[2], 3) for r in rows])
