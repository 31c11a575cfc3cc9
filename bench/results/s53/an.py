import gzip, json, sys, collections, statistics as st
d = json.load((gzip.open if sys.argv[1].endswith(".gz") else open)(sys.argv[1], "rt"))
for name in ("mtp_step", "mtp_step_alt"):
    rep = -1; per = collections.defaultdict(lambda: collections.defaultdict(list))
    for e in d["log"][name]:
        if "rep" in e: rep = e["rep"]; continue
        if "ms" not in e or not e.get("dec"): continue
        key = (rep, e["req"])
        spec = e["k"] > 0
        per[key]["spec" if spec else "plain"].append((e["ms"], 1 + sum(e["acc"]), e["vl"][0], e["reason"]))
    print(name)
    for key in sorted(per, key=str):
        p = per[key]
        s = p["spec"]; z = p["plain"]
        line = f"  rep{key[0]} {key[1]}: spec {len(s)} rounds"
        if s: line += f" tok/round {sum(x[1] for x in s)/len(s):.2f} ms/round {st.median(x[0] for x in s):.2f} tok/ms {sum(x[1] for x in s)/sum(x[0] for x in s):.4f} vl {sum(x[2] for x in s)/len(s):.2f}"
        line += f" | plain {len(z)} rounds"
        if z: line += f" ms {st.median(x[0] for x in z):.2f} tok/ms {len(z)/sum(x[0] for x in z):.4f}"
        print(line)
