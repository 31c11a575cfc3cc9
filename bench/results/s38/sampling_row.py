"""Stop 38: what one random (temperature > 0) row's sampling costs on this CPU, piece by piece, as
adaspec.sampling.sampler.sample does it over the bundled model's 49152-token vocabulary: the softmax,
the float64 uniforms, their log1p (the exponential race's noise), and the whole `sample` call for one
seeded row. Minimum of 5 passes of 100 calls, milliseconds.
Run: OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s38/sampling_row.py
"""
import sys
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from adaspec.sampling.sampler import SamplingTensors, sample  # noqa: E402
from adaspec.sampling.seeding import position_generator  # noqa: E402
from adaspec.sampling_params import SamplingParams  # noqa: E402
from bench.common import best_ms  # noqa: E402

V = 49152


def main():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, V, generator=g)
    u = torch.rand(1, V, dtype=torch.float64, generator=g)
    t = SamplingTensors.from_params([SamplingParams(temperature=0.8, seed=1)], device="cpu")
    rows = {
        "softmax of logits / T": lambda: (logits / 0.8).softmax(dim=-1),
        "float64 uniforms (torch.rand)": lambda: torch.rand(1, V, dtype=torch.float64, generator=g),
        "their -log1p(-U) (the noise)": lambda: u.neg().log1p_().neg_(),
        "sample(): one seeded row, all of it": lambda: sample(logits, t, [position_generator(1, 7)]),
        "sample(): one greedy row, for scale": lambda: sample(logits, SamplingTensors.from_params(
            [SamplingParams(temperature=0.0)], device="cpu")),
    }
    print("| step (one row, 49152 tokens) | ms |\n| --- | ---: |")
    for name, fn in rows.items():
        print(f"| {name} | {best_ms(fn):.3f} |")


if __name__ == "__main__":
    main()
