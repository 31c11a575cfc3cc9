import gzip, json, sys
d = json.load((gzip.open if sys.argv[1].endswith(".gz") else open)(sys.argv[1], "rt")); R = int(sys.argv[2]); reqs = sys.argv[3].split(",")
def rounds(name):
    rep = -1; out = {}
    for e in d["log"][name]:
        if "rep" in e: rep = e["rep"]; continue
        if rep != R or e["req"] not in reqs or "acc" not in e: continue
        out.setdefault(e["req"], []).append(e)
    return out
A, F = rounds("mtp_step"), rounds("mtp_step_alt")
for req in reqs:
    # token position -> (k, acc) for adaptive; forced: per position, tokens/ms in windows
    pos = 0; amap = []
    for e in A[req]:
        n = 1 + sum(e["acc"]); amap.append((pos, e["k"], n, e["ms"])); pos += n
    pos = 0; fmap = []
    for e in F[req]:
        n = 1 + sum(e["acc"]); fmap.append((pos, n, e["ms"], e["vl"][0])); pos += n
    # segment adaptive into runs of k==0 / k>0
    segs = []; cur = None
    for p, k, n, ms in amap:
        kind = k > 0
        if cur is None or cur[0] != kind: cur = [kind, p, p, 0, 0.0, 0]; segs.append(cur)
        cur[2] = p + n; cur[3] += n; cur[4] += ms; cur[5] += 1
    for kind, a, b, n, ms, r in segs:
        if r < 8: continue
        fr = [x for x in fmap if a <= x[0] < b]
        ft = sum(x[1] for x in fr); fms = sum(x[2] for x in fr)
        print(req, "spec" if kind else "PLAIN", f"tokens {a}-{b} rounds {r}: adaptive {n/ms:.4f} tok/ms; forced there {ft/fms if fms else 0:.4f} tok/ms, tok/round {ft/len(fr) if fr else 0:.2f}")
