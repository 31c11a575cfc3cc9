"""The MTP draft's refresh: outputs for each request's newest entry only, against the whole block on every
entry (issue 13), in one process.

A drafting round after a stretch of k = 0 rounds refreshes every deferred position. `MTPDraft.draft`
runs its decoder block with `keep` = each request's newest entry (DecoderLayer.forward): every entry
writes the draft's cache, only the kept rows get the output projection and MLP. The baseline is the
same call computing the block for every entry and then selecting the newest rows (what the draft did
before). Both run on the shipped MTP draft bound to the bundled target, alternating, on the same
synthetic batch (B requests x N deferred entries, random features and tokens); the script checks
that both give the same step-1 hidden states bit for bit and prints the median times.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/mtp_refresh.py --shapes=16x100,4x100,16x1 --repeats=7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="MTP refresh with kept rows vs the whole block on every entry",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--shapes", default="16x100,4x100,16x1",
                   help="comma-separated BxN: B requests with N deferred entries each")
    p.add_argument("--repeats", type=int, default=7, help="timed calls per variant and shape (medians)")
    args = p.parse_args(argv)
    try:
        args.shapes = [tuple(int(v) for v in s.split("x")) for s in common.parse_list(args.shapes, str, name="shapes")]
    except ValueError:
        p.error(f"--shapes: expected BxN pairs such as 16x100, got {args.shapes!r}")
    if any(len(s) != 2 or min(s) < 1 for s in args.shapes) or args.repeats < 1:
        p.error("--shapes needs BxN with B, N >= 1 and --repeats >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(1)
    import torch

    from adaspec.models.attention import build_layout

    llm = common.build_llm("float32", "MTP", 1, None, max_seqs=max(b for b, _ in args.shapes))
    d = llm.engine.drafter
    H = d.norm.weight.shape[0]
    print(f"# MTP refresh: {common.machine()}; torch {torch.__version__}", flush=True)

    def step1(hidden, tokens, B, N, keep: bool):
        """draft()'s refresh and step-1 input: kept rows, or the whole block then the newest rows."""
        lay = build_layout(list(range(B)), [0] * B, [N] * B, hidden.device, native=d.native_kernels)
        x = d.fuse(hidden, tokens)
        cos, sin = d.rotary(lay.row_pos + 1, x.dtype)
        last = torch.arange(N - 1, B * N, N)
        if keep:
            return d.layer(x, cos, sin, d.cache_k, d.cache_v, lay, last if N > 1 else None)
        return d.layer(x, cos, sin, d.cache_k, d.cache_v, lay).index_select(0, last)

    rows = []
    for B, N in args.shapes:
        g = torch.Generator().manual_seed(B * 1000 + N)
        hidden, tokens = torch.randn(B * N, H, generator=g), torch.randint(0, 1000, (B * N,), generator=g)
        times: dict[bool, list[float]] = {True: [], False: []}
        with torch.inference_mode():
            same = torch.equal(step1(hidden, tokens, B, N, True), step1(hidden, tokens, B, N, False))
            for rep in range(args.repeats):
                for keep in ((True, False) if rep % 2 == 0 else (False, True)):
                    t0 = time.perf_counter()
                    step1(hidden, tokens, B, N, keep)
                    times[keep].append(time.perf_counter() - t0)
        new, old = (1000 * statistics.median(times[k]) for k in (True, False))
        rows.append([f"{B} x {N}", f"{old:.2f}", f"{new:.2f}", f"{old / new:.2f}x", "yes" if same else "NO"])
    print(common.markdown_table(["requests x entries", "whole block, ms", "kept rows, ms", "speed-up",
                                 "same step-1 input"], rows, "lrrrl"))
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
