"""Layer kernels, native against torch, one layer call at a time (issue 14, `--layer_kernels`).

Attention as a decoder layer of the bundled model calls it (9 query / 3 KV heads, head size 64):
`models.attention.ragged_attention` on a layout built with `native=True` (adaspec's kernel) and
without (torch: SDPA on the folded, padded query rows, plus the two cache scatters), over 30
separate caches used in turn so that, as in a forward, the keys stream from memory rather than sit
in cache. Decode steps of B requests with L keys each, then prefill chunks of 512 rows starting at
0..1536. Also RMSNorm (+ residual add) and SiLU-and-multiply at the decode and prefill row counts.
Medians of --repeats passes, process CPU time, one thread; the two paths alternate in every pass.

    taskset -c 0 python bench/layer_kernels.py --json_out=bench/results/layer_kernels.json
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
from bench.common import markdown_table  # noqa: E402

HEADS, KV_HEADS, DIM, HIDDEN, FFN, LAYERS = 9, 3, 64, 576, 1536, 30


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="native vs torch layer kernels, per layer call",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--repeats", type=int, default=7, help="timed passes (medians reported)")
    p.add_argument("--calls", type=int, default=60, help="layer calls per pass (cycling over the 30 caches)")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    return p.parse_args(argv)


def _time(fn, calls: int) -> float:
    t = time.process_time()
    for i in range(calls):
        fn(i)
    return (time.process_time() - t) / calls * 1000


def attention_cases():
    decode = [("decode", b, 1, length) for b in (1, 8, 16) for length in (256, 512, 1024)]
    return decode + [("prefill 512", 1, 512, start) for start in (0, 512, 1024, 1536)]


def run_attention(args) -> list[dict]:
    import torch

    from adaspec.models.attention import build_layout, ragged_attention

    g = torch.Generator().manual_seed(0)
    rows = []
    for kind, b, q, at in attention_cases():
        slots = b
        caches = [(torch.randn(slots, KV_HEADS, 2048, DIM, generator=g), torch.randn(slots, KV_HEADS, 2048, DIM,
                                                                                        generator=g))
                  for _ in range(LAYERS)]
        starts = [at - 1] * b if kind == "decode" else [at]
        layouts = {n: build_layout(list(range(b)), starts, [q] * b, native=n == "native") for n in ("native", "torch")}
        x = [torch.randn(b * q, h, DIM, generator=g) for h in (HEADS, KV_HEADS, KV_HEADS)]
        times = {"native": [], "torch": []}
        for _ in range(args.repeats):
            for name in times:
                lay = layouts[name]
                times[name].append(_time(lambda i: ragged_attention(*x, *caches[i % LAYERS], lay), args.calls))
        med = {n: statistics.median(v) for n, v in times.items()}
        rows.append({"case": kind, "requests": b, "rows": q, "keys_or_start": at, "native_ms": med["native"],
                     "torch_ms": med["torch"], "speedup": med["torch"] / med["native"]})
        common.log(f"[bench] attention {kind} B={b} q={q} at {at}: native {med['native']:.3f} ms, torch "
                   f"{med['torch']:.3f} ms")
    return rows


def run_elementwise(args) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from adaspec.models import native_kernels
    from adaspec.models.llama import RMSNorm

    norm = RMSNorm(HIDDEN, 1e-5)
    rows = []
    for t in (1, 8, 512):
        x, a, gu = torch.randn(t, HIDDEN), torch.randn(t, HIDDEN), torch.randn(t, 2 * FFN)
        fns = {
            ("add + RMSNorm", "torch"): lambda i: norm(x + a),
            ("add + RMSNorm", "native"): lambda i: native_kernels.add_rmsnorm(x, a.clone(), norm.weight, norm.eps),
            ("SiLU * up", "torch"): lambda i: (lambda gt, up: F.silu(gt) * up)(*gu.chunk(2, dim=-1)),
            ("SiLU * up", "native"): lambda i: native_kernels.silu_mul(gu),
        }
        times = {k: [] for k in fns}
        with torch.inference_mode():
            for _ in range(args.repeats):
                for k, fn in fns.items():
                    times[k].append(_time(fn, args.calls * 5))
        for op in ("add + RMSNorm", "SiLU * up"):
            nat, tor = statistics.median(times[op, "native"]), statistics.median(times[op, "torch"])
            rows.append({"op": op, "rows": t, "native_ms": nat, "torch_ms": tor, "speedup": tor / nat})
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(1)
    from adaspec.models import native_kernels

    k = native_kernels.kernels()
    if isinstance(k, str):
        print(f"native layer kernels unavailable: {k}")
        return 1
    info = common.run_info(args)
    print(f"# layer kernels: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    att, ew = run_attention(args), run_elementwise(args)
    print("\n### attention, one layer call (ms, process CPU; median of repeats)\n")
    print(markdown_table(["case", "requests", "rows each", "keys (decode) / first position (prefill)", "native",
                          "torch (SDPA)", "torch / native"],
                         [[r["case"], r["requests"], r["rows"], r["keys_or_start"], f"{r['native_ms']:.3f}",
                           f"{r['torch_ms']:.3f}", f"{r['speedup']:.2f}x"] for r in att], "lrrrrrr"))
    print("\n### element-wise ops, one call (ms)\n")
    print(markdown_table(["op", "rows", "native", "torch", "torch / native"],
                         [[r["op"], r["rows"], f"{r['native_ms']:.4f}", f"{r['torch_ms']:.4f}", f"{r['speedup']:.2f}x"]
                          for r in ew], "lrrrr"))
    if args.json_out:
        common.write_json(args.json_out, {"info": info, "attention": att, "elementwise": ew})
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
