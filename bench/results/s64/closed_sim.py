"""Stop 64: what drafting a share f of a closed batch's rounds gives, with no controller: four requests of 256 tokens,
a plain round of b requests at c(b) (1, 0.97, 0.95, 0.93 for b = 4..1), a drafted round at 1.45 c(b) in which each
running request gains 1 + A tokens, A geometric with mean m (capped at 7); 200 seeds per point. "per-round ideal" is
(1 + m) / 1.45, what a drafted round yields against a plain one.

    python bench/results/s64/closed_sim.py
"""
import random
import statistics


def c(b):
    return {4: 1.0, 3: 0.97, 2: 0.95, 1: 0.93, 0: 0.0}[b]


def run(f, m, dcost=1.45, n=256, seed=0):
    rng = random.Random(seed)
    r, T = [n] * 4, 0.0
    while any(x > 0 for x in r):
        b = sum(1 for x in r if x > 0)
        if rng.random() < f:
            T += c(b) * dcost
            for i in range(4):
                if r[i] > 0:
                    a = 0
                    while a < 7 and rng.random() < m / (1 + m):
                        a += 1
                    r[i] -= 1 + a
        else:
            T += c(b)
            for i in range(4):
                if r[i] > 0:
                    r[i] -= 1
    return n * c(4) / T


for m in (0.55, 1.3):
    for f in (0.0, 0.05, 0.13, 0.3, 0.6, 1.0):
        xs = [run(f, m, seed=s) for s in range(200)]
        print(f"m {m} f {f}: x plain {statistics.mean(xs):.3f}   per-round ideal {(1 + m) / 1.45:.3f}")
