"""Stop 46: RoundRunner._add_entries alone (B decoding requests, one entry row each per round, 256 rounds per stream,
then the requests finish); argv: the checkout to import, B.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s46/add_entries_micro.py . 4
"""
import sys, time, types
sys.path.insert(0, sys.argv[1])
import torch
from adaspec.runner.round_runner import RoundRunner
B = int(sys.argv[2]); F = 576
rr = RoundRunner.__new__(RoundRunner); rr.drafter = object(); rr.capture_layers = (); rr.pending = {}
out = types.SimpleNamespace(hidden=torch.randn(B, F), captured=[])
best = []
for rep in range(7):
    t = time.perf_counter()
    for s in range(8):
        for pos in range(256):
            rr._add_entries(out, [(f"r{s}-{b}", 100 + pos, b, 1, [7]) for b in range(B)])
        rr.pending.clear()
    best.append((time.perf_counter() - t) / (8 * 256))
best.sort(); print(sys.argv[1], f"B={B}: {1e6*best[3]:.1f} us per round (median of 7)")
