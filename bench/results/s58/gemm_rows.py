import sys, time, statistics
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.models.loader import load_model, resolve_model
from adaspec.models.linear import Fp16wLinear
torch.set_num_threads(1)
md = resolve_model(None)
cfg, target = load_model(md, torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
print(target.native_gemm["rows"] if target.native_gemm else None, {k: round(v, 3) for k, v in (target.native_gemm or {}).get("speedups", {}).items()})
mods = [m for m in target.modules() if isinstance(m, Fp16wLinear) and m.native_gemm is not None]
print(len(mods), sum(m.in_features * m.out_features for m in mods) / 1e6, "M params")
xs = {k: torch.randn(32, k) for k in {m.in_features for m in mods}}
bufs = [m.native_gemm.packed for m in mods]
def floor():
    for b in bufs: b.sum(dtype=torch.int32) if False else b.view(torch.float16).max()
def run(kind, M):
    for m in mods:
        x = xs[m.in_features][:M]
        m.native_gemm(x) if kind == "n" else m._fbgemm(x)
def med(fn, n=9):
    o = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); o.append(time.perf_counter() - t0)
    return 1000 * statistics.median(o)
print("read floor (max over fp16)", f"{med(floor):.2f}")
for M in (1, 2, 3, 4, 5, 6, 8, 12, 16):
    print(M, "fbgemm", f"{med(lambda: run('f', M)):.2f}", "native", f"{med(lambda: run('n', M)):.2f}", flush=True)
