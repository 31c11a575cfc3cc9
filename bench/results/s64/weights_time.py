"""Stop 64: host time of closed_batch_values (the per-request weights a drafting round of a closed batch computes) at
B = 2, 4, 8, 16 requests with random work to go; median of 5 batches of 200 calls.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s64/weights_time.py
"""
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from adaspec.adaptive.closed_batch import closed_batch_values  # noqa: E402

PLAIN = {1: 38.0, 2: 39.0, 4: 40.5, 8: 46.0, 16: 60.0}.get  # plain-round ms per bucket, the Xeon VM's shape
rng = random.Random(0)
for B in (2, 4, 8, 16):
    rem = tuple(rng.randint(1, 256) for _ in range(B))
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            closed_batch_values(rem, 0, [1, 2, 4, 8, 16], PLAIN)
        times.append((time.perf_counter() - t0) / 200 * 1e3)
    print(f"B = {B}: {statistics.median(times):.3f} ms per call")
