"""The streaming trainer's teacher on this CPU: float32 vs bfloat16 prefill, in one run (issue 11).

Measures, one thread, in the same process: a [2048, 576] x [576, 1536] matrix product in each dtype
(GFLOPS), and the bundled target's prefill of `--batch` windows of `--length` tokens with the three
capture layers, the LM head and its top-32 log-probabilities, what `training/stream.Teacher` does
per step (tokens/s, median of `--repeats`).

    taskset -c 0 python bench/teacher_prefill.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, markdown_table  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=4, help="windows per prefill (default 4)")
    p.add_argument("--length", type=int, default=512, help="tokens per window (default 512)")
    p.add_argument("--repeats", type=int, default=3, help="measurements per dtype (default 3)")
    args = p.parse_args(argv)
    import torch

    from adaspec.models.loader import load_model, resolve_model
    from adaspec.training.stream import Teacher

    torch.set_num_threads(1)
    rows = []
    for dtype, backend in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        a, w = torch.randn(2048, 576, dtype=dtype), torch.randn(1536, 576, dtype=dtype)
        torch.nn.functional.linear(a, w)
        t0 = time.perf_counter()
        for _ in range(10):
            torch.nn.functional.linear(a, w)
        gflops = 2 * 2048 * 576 * 1536 * 10 / (time.perf_counter() - t0) / 1e9
        _, model = load_model(resolve_model(None), dtype, "cpu", linear_backend=backend)
        teacher = Teacher(model, 32, (9, 19, 29), args.batch, args.length)
        windows = [torch.randint(0, 49000, (args.length,)) for _ in range(args.batch)]
        teacher(windows)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            teacher(windows)
            times.append(time.perf_counter() - t0)
        rows.append([str(dtype).removeprefix("torch."), f"{gflops:.0f}",
                     f"{args.batch * args.length / statistics.median(times):.0f}"])
    print(f"machine: {machine()}; one thread; prefill of {args.batch} x {args.length} tokens, median of {args.repeats}")
    print(markdown_table(["dtype", "matmul GFLOPS", "teacher prefill tok/s"], rows))
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
