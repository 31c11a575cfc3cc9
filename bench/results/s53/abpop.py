"""Per repeat: mtp_step and mtp_step_alt over the best fixed configuration (plain included), and the population's
engine over the other (CPU clock). Which engine carries the population: --pop=alt (alt_step_policy set it) or
--pop=step (the default carries it, alt set population_drafts 0)."""
import json, sys, statistics
pop = "alt"
files = []
for a in sys.argv[1:]:
    if a.startswith("--pop="):
        pop = a.split("=", 1)[1]
    else:
        files.append(a)
allr = []
for f in files:
    d = json.load(open(f))
    raw = {r["config"]: r["raw"] for r in d["results"]}
    rates = {c: [x["tokens"] / x["cpu_s"] for x in v] for c, v in raw.items()}
    fx = [c for c in rates if not c.startswith("mtp_step")]
    with_pop, without = ("mtp_step_alt", "mtp_step") if pop == "alt" else ("mtp_step", "mtp_step_alt")
    rows = []
    for i in range(len(rates["mtp_step"])):
        best = max(rates[c][i] for c in fx)
        rows.append((rates[with_pop][i] / best, rates[without][i] / best, rates[with_pop][i] / rates[without][i]))
    allr += [r[2] for r in rows]
    print(f.split("/")[-1], "population/best", [round(r[0], 3) for r in rows], "without/best",
          [round(r[1], 3) for r in rows], "population/without", [round(r[2], 3) for r in rows])
if len(files) > 1:
    print("all", len(allr), "repeats: population/without median", round(statistics.median(allr), 4),
          "min", round(min(allr), 3), "max", round(max(allr), 3), ">= 1:", sum(x >= 1 for x in allr))
