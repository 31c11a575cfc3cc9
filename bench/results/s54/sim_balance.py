import random, statistics as st
def plain(b): return 14.1 + 3.1 * (b - 1) if b else 0.0
def cost(b, m):  # b running, m drafting k=1
    if m == 0: return plain(b)
    rows = 0.4 if b == 1 else 2.2
    return plain(b) + m * rows + 1.75 + 0.3 * (m - 1)
def run(acc, policy, n0=256, seed=0):
    rng = random.Random(seed); n = [n0] * len(acc); T = 0.0
    while any(x > 0 for x in n):
        live = [i for i in range(len(n)) if n[i] > 0]
        b = len(live)
        if policy == "plain": d = []
        elif policy == "k1": d = live
        elif policy.startswith("bal"):
            nmax = max(n[i] for i in live)
            group = [i for i in live if n[i] >= nmax - 1]
            if len(group) == b: d = live if policy == "bal1" else []
            else:
                j = len(group)
                v = lambda a: min(plain(j), cost(j, j) / (1 + a)) / j
                delta = (cost(b, b) - plain(b)) / b + (cost(1, 1) - plain(1))
                d = [i for i in group if acc[i] * v(acc[i]) > delta]
        elif policy == "k1tail":  # k1 at b<=2, else plain
            d = live if b <= 2 else []
        T += cost(b, len(d))
        for i in live:
            adv = 1 + (1 if i in d and n[i] > 1 and rng.random() < acc[i] else 0)
            n[i] = max(0, n[i] - adv)
    return T
for acc in ([0.75, 0.6, 0.45, 0.35], [0.6, 0.55, 0.5, 0.45], [0.85, 0.3, 0.3, 0.25], [0.5]*4, [0.8,0.7,0.7,0.6]):
    base = st.mean(run(acc, "plain", seed=s) for s in range(5))
    print(acc, {p: round(base / st.mean(run(acc, p, seed=s) for s in range(5)), 3) for p in ("k1", "bal0", "bal1", "k1tail")})
print("k1 stretch at rounds 50-90, then plain / then bal0 / then k1tail")
def run2(acc, after, n0=256, seed=0):
    rng = random.Random(seed); n = [n0] * len(acc); T = 0.0; r = 0
    while any(x > 0 for x in n):
        r += 1
        live = [i for i in range(len(n)) if n[i] > 0]; b = len(live)
        if 50 <= r < 90: d = live
        elif after == "plain": d = []
        elif after == "tailk1": d = live if b < len(acc) else []
        else:
            nmax = max(n[i] for i in live); group = [i for i in live if n[i] >= nmax - 1]
            if len(group) == b: d = live if (after == "bal0k1tail" and b < len(acc)) else []
            else:
                j = len(group); v = lambda a: min(plain(j), cost(j, j) / (1 + a)) / j
                delta = (cost(b, b) - plain(b)) / b + (cost(1, 1) - plain(1))
                d = [i for i in group if acc[i] * v(acc[i]) > delta]
        T += cost(b, len(d))
        for i in live:
            adv = 1 + (1 if i in d and n[i] > 1 and rng.random() < acc[i] else 0)
            n[i] = max(0, n[i] - adv)
    return T
for acc in ([0.75, 0.6, 0.45, 0.35], [0.6, 0.55, 0.5, 0.45], [0.85, 0.3, 0.3, 0.25]):
    base = st.mean(run(acc, "plain", seed=s) for s in range(5))
    print(acc, {p: round(base / st.mean(run2(acc, p, seed=s) for s in range(5)), 3) for p in ("plain", "tailk1", "bal0", "bal0k1tail")})
