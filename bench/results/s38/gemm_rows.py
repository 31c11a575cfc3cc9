"""Stop 38: the AVX2 fp16w kernel (gemm.cpp) before and after, per row count, in one process: the
previous commit's source (git show e135a9b:adaspec/kernels/gemm.cpp) and the working tree's, compiled
with the engine's flags, on the same packed weights. Two regimes:
  - memory: each product reads a different copy of the weight (>= 64 MB in all, as a decode step
    streams the model's 270 MB): time at M rows / time at 1 row, per kernel;
  - cache: one weight, products back to back (L2/L3-resident): GFLOPS.
Every output is compared bit for bit between the two kernels and with single-row products (row
independence). Run: OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s38/gemm_rows.py
"""
import ctypes, subprocess, sys, tempfile, time
from pathlib import Path
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from adaspec.kernels import build  # noqa: E402

P, I = ctypes.c_void_p, ctypes.c_int64
ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 32)
SHAPES = [(1536, 576), (576, 1536), (960, 576), (49152, 576)]


def compile_kernel(source: str, tag: str, tmp: Path):
    src = tmp / f"{tag}.cpp"
    src.write_text(source)
    so = tmp / f"{tag}.so"
    subprocess.check_call([build.compiler(), *build.FLAGS, *build.NATIVE_FLAGS, str(src), "-o", str(so)])
    lib = ctypes.CDLL(str(so))
    gemm, pack = lib.adaspec_gemm_f16w, lib.adaspec_pack_f16w
    gemm.argtypes, gemm.restype = [P, I, I, I, P, I, P, I], ctypes.c_int
    pack.argtypes, pack.restype = [P, I, I, P], ctypes.c_int
    return pack, gemm


def best_time(gemm, x, bufs, y, N, passes):
    M, K = x.shape
    best = 1e9
    for _ in range(passes):
        t0 = time.perf_counter()
        for b in bufs:
            gemm(x.data_ptr(), M, K, K, b.data_ptr(), N, y.data_ptr(), N)
        best = min(best, (time.perf_counter() - t0) / len(bufs))
    return best


def main():
    torch.set_num_threads(1)
    old = subprocess.check_output(["git", "-C", str(ROOT), "show", "e135a9b:adaspec/kernels/gemm.cpp"], text=True)
    new = (ROOT / "adaspec/kernels/gemm.cpp").read_text()
    with tempfile.TemporaryDirectory() as d:
        kernels = {"before": compile_kernel(old, "before", Path(d)), "after": compile_kernel(new, "after", Path(d))}
        mem_rows, cache_rows = [], []
        for N, K in SHAPES:
            w = torch.randn(N, K) * K ** -0.5
            copies = max(1, int(64e6 // (N * K * 2)))
            packed = {}
            for name, (pack, _) in kernels.items():
                packed[name] = [torch.empty(((N + 31) // 32) * K * 32, dtype=torch.int16) for _ in range(copies)]
                for b in packed[name]:
                    assert pack(w.data_ptr(), N, K, b.data_ptr()) == 0
            t_mem = {name: {} for name in kernels}
            t_cache = {name: {} for name in kernels}
            for M in ROWS:
                x = torch.randn(M, K)
                outs = {}
                for name, (_, gemm) in kernels.items():
                    y = torch.empty(M, N)
                    gemm(x.data_ptr(), M, K, K, packed[name][0].data_ptr(), N, y.data_ptr(), N)
                    y1 = torch.empty(1, N)
                    gemm(x[-1:].contiguous().data_ptr(), 1, K, K, packed[name][0].data_ptr(), N, y1.data_ptr(), N)
                    assert torch.equal(y1[0], y[-1]), f"{name}: row {M - 1} of {M} differs from the same row alone"
                    outs[name] = y
                    t_mem[name][M] = best_time(gemm, x, packed[name] * (3 if copies == 1 else 1), y, N, 9)
                    t_cache[name][M] = best_time(gemm, x, packed[name][:1] * (3 if N > 40000 else 20), y, N, 7)
                assert torch.equal(outs["before"], outs["after"]), f"kernels differ at {M} rows of {N}x{K}"
            mem_rows.append(f"| {N} x {K} | " + " | ".join(
                f"{t_mem['before'][M] / t_mem['before'][1]:.2f} / **{t_mem['after'][M] / t_mem['after'][1]:.2f}**"
                for M in ROWS) + f" | {t_mem['before'][1] * 1e6:.0f} / {t_mem['after'][1] * 1e6:.0f} |")
            cache_rows.append(f"| {N} x {K} | " + " | ".join(
                f"{2 * M * N * K / t_cache['before'][M] / 1e9:.0f} / **{2 * M * N * K / t_cache['after'][M] / 1e9:.0f}**"
                for M in ROWS) + " |")
            print(f"{N}x{K} done", file=sys.stderr, flush=True)
    head = "| weight [out, in] | " + " | ".join(f"{M} rows" for M in ROWS)
    sep = "| --- | " + " | ".join("---:" for _ in ROWS)
    print("weights from memory: time at M rows / time at 1 row, before / **after** (last column: 1 row, us)\n")
    print(head + " | 1 row us |\n" + sep + " | ---: |\n" + "\n".join(mem_rows))
    print("\nweights in cache: GFLOPS, before / **after**\n")
    print(head + " |\n" + sep + " |\n" + "\n".join(cache_rows))
    print("\nall outputs bit-identical between the kernels and row-independent")


if __name__ == "__main__":
    main()
