"""Stop 39: the CPU race against the full race, and numpy's argmax against torch's index-tracking max, per
49152-token row on one thread (same process, same rows; minimum of 5 passes, ms). Also checks that the two
races pick the same tokens on the rows timed and on 64 x 20 fresh rows at several temperatures.
Run: OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s39/race_row.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from adaspec.sampling.sampler import _noise, first_argmax, race  # noqa: E402
from bench.common import best_ms  # noqa: E402

V = 49152


def main():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    differ = rows = 0
    for T in (0.3, 0.8, 1.5, 5.0):
        probs = (torch.randn(64, V, generator=g) * 4 / T).softmax(-1)
        for _ in range(20):
            u = torch.rand(64, V, dtype=torch.float64, generator=g)
            differ += int((race(probs, u) != first_argmax(probs / _noise(u))).sum())
            rows += 64
    print(f"same winner: {rows - differ} of {rows} rows\n")
    print("| rows | full race (log of every U), ms | race, ms | torch max(dim).indices, ms | numpy argmax, ms |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for R in (1, 8):
        probs = (torch.randn(R, V, generator=g) / 0.8).softmax(-1)
        u = torch.rand(R, V, dtype=torch.float64, generator=g)
        n = 200 if R == 1 else 50
        cols = [best_ms(lambda: probs.div(_noise(u)).max(dim=-1).indices, n), best_ms(lambda: race(probs, u), n),
                best_ms(lambda: probs.max(dim=-1).indices, n), best_ms(lambda: first_argmax(probs), n)]
        print(f"| {R} | " + " | ".join(f"{c:.3f}" for c in cols) + " |")


if __name__ == "__main__":
    main()
