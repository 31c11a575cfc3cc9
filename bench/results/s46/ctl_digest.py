"""Stop 46: a digest of every decision record (k, reason, predicted, optimistic, gain: exact reprs) of the draft step
controller over random streams: batches of 1-16 requests that join and leave, closed and open batches, acceptance
varying per request and over time, lag 1 and 2. A change meant to keep the controller's decisions must keep the
digest (run it on both checkouts).

    python bench/results/s46/ctl_digest.py <checkout>
"""
import hashlib, random, sys
sys.path.insert(0, sys.argv[1])
from adaspec.adaptive.step_controller import DraftStepController, StepPolicy

COSTS = {1: [14.9, 17.6, 19.7, 23.6, 29.8, 31.5], 4: [21.8, 33.3, 45.8, 63.1, 78.2, 93.1],
         16: [96.5, 160.0, 240.0, 330.0, 420.0, 500.0]}
# a machine where speculation is cheap (the GPU-like case), so that closed batches score per depth and k moves
CHEAP = {b: [c[0] * (1 + 0.04 * k) for k in range(6)] for b, c in COSTS.items()}
pad = lambda b: 1 if b == 1 else 4 if b <= 4 else 16 if b <= 16 else None  # noqa: E731
h = hashlib.md5(); n = 0
for seed in range(12):
    rng = random.Random(seed)
    k_max, lag = rng.choice([3, 5]), rng.choice([1, 2])
    table = CHEAP if seed % 2 else COSTS
    ctl = DraftStepController(k_max, StepPolicy(), lambda b, k, t=table: t[b][k], pad, lag=lag, buckets=[1, 4, 16])
    live, next_id, pending = {}, 0, []
    for r in range(1500):
        while len(live) < rng.choice([1, 2, 4, 8, 16]) and rng.random() < 0.5:
            live[next_id] = [rng.randint(20, 256), rng.random() ** 0.7]; next_id += 1
        if not live:
            live[next_id] = [200, 0.5]; next_id += 1
        ids = list(live)
        closed = [(live[i][0], 1.0) for i in ids] if rng.random() < 0.7 else None
        for item in [p for p in pending if p[2] <= r - lag]:
            ctl.observe(*item[:2], round_id=item[2]); pending.remove(item)
        k = ctl.plan(len(ids), round_id=r, kv_len=100 + r % 300, can_verify=rng.random() < 0.97, requests=ids,
                     closed=closed)
        drift = 0.7 + 0.3 * ((r // 200) % 2)
        acc = []
        for i in ids:
            m = 0
            while m < k and rng.random() < live[i][1] * drift:
                m += 1
            acc.append(m)
            live[i][0] -= 1 + m
        pending.append(([k] * len(ids), acc, r))
        for i in ids:
            if live[i][0] <= 0:
                del live[i]
    for d in ctl.decisions:
        h.update(repr((d.completed, d.batch_size, d.bcap, d.previous_k, d.k, d.reason, sorted(d.predicted.items()),
                       d.gain, sorted(d.optimistic.items()))).encode()); n += 1
    h.update(repr(sorted(ctl.k_histogram.items())).encode())
print(f"{n} decision records, digest {h.hexdigest()}")
