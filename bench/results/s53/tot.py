import gzip, json, sys, collections
d = json.load((gzip.open if sys.argv[1].endswith(".gz") else open)(sys.argv[1], "rt"))
def per(name):
    rep = -1; out = collections.defaultdict(float); pl = collections.defaultdict(float)
    for e in d["log"][name]:
        if "rep" in e: rep = e["rep"]; continue
        if "ms" not in e or e["ms"] is None or e["req"] is None: continue
        out[(rep, e["req"])] += e["ms"]
        if e["k"] == 0: pl[(rep, e["req"])] += e["ms"]
    return out, pl
A, Ap = per("mtp_step"); F, _ = per("mtp_step_alt")
keysA = sorted(A, key=lambda x: (x[0], int(x[1].split("-")[1]))); keysF = sorted(F, key=lambda x: (x[0], int(x[1].split("-")[1])))
for ka, kf in zip(keysA, keysF):
    print(ka, kf[1], f"adaptive {A[ka]:.0f} ms (plain rounds {Ap[ka]:.0f}) forced {F[kf]:.0f} ms  diff {A[ka]-F[kf]:+.0f}")
print("total", sum(A.values()), sum(F.values()))
