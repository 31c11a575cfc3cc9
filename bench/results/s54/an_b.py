import json, sys, collections, statistics as st
log = json.load(open(sys.argv[1]))
for name, rows in log.items():
    rep, prev_k = -1, None
    cat = collections.defaultdict(lambda: [0, 0.0, 0])  # rounds, ms, tokens
    for e in rows:
        if "rep" in e: rep = e["rep"]; prev_k = None; continue
        if not e["dec"]: prev_k = e["k"]; continue
        toks = e["B"] + sum(e["acc"])
        if e["probe"]: c = "probe"
        elif e["check"]: c = f"check k{e['k']}"
        elif e["k"] == 0: c = "plain"
        elif prev_k == 0: c = "k>=1 after plain"
        else: c = "k>=1 steady"
        c = f"B{e['B']} {c}"
        x = cat[c]; x[0] += 1; x[1] += e["ms"]; x[2] += toks
        prev_k = e["k"]
    print(name)
    for c in sorted(cat):
        n, ms, t = cat[c]
        print(f"  {c:24s} rounds {n:5d} ms/round {ms/n:7.2f} tok/round {t/n:5.2f} tok/ms {t/ms:.4f}")
