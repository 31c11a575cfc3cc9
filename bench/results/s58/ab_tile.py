import sys, time, statistics, ctypes
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.models.loader import load_model, resolve_model
from adaspec.models.linear import Fp16wLinear
torch.set_num_threads(1)
cfg, target = load_model(resolve_model(None), torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
mods = [m for m in target.modules() if isinstance(m, Fp16wLinear) and m.native_gemm is not None]
P, I = ctypes.c_void_p, ctypes.c_int64
libs = {}
for n in ("before", "after"):
    f = ctypes.CDLL(f"/tmp/{n}.so").adaspec_gemm_f16w
    f.argtypes, f.restype = [P, I, I, I, P, I, P, I], ctypes.c_int
    libs[n] = f
xs = {k: torch.randn(32, k) for k in {m.in_features for m in mods}}
shapes = [(40, 70), (33, 7), (96, 24), (80, 40)]
for M in list(range(1, 33)):
    for m in mods[:5] + mods[-1:]:
        x = xs[m.in_features][:M]; ys = []
        for n, f in libs.items():
            y = torch.empty(M, m.out_features); f(x.data_ptr(), M, m.in_features, x.stride(0), m.native_gemm.packed.data_ptr(), m.out_features, y.data_ptr(), m.out_features); ys.append(y)
        assert torch.equal(*ys), M
print("bits equal 1-32 rows")
for M in (1, 2, 3, 4, 6, 8, 12, 16):
    r = {n: [] for n in libs}
    for rep in range(9):
        for n in (libs if rep % 2 == 0 else list(libs)[::-1]):
            f = libs[n]; t0 = time.perf_counter()
            for m in mods:
                x = xs[m.in_features][:M]; y = torch.empty(M, m.out_features)
                f(x.data_ptr(), M, m.in_features, x.stride(0), m.native_gemm.packed.data_ptr(), m.out_features, y.data_ptr(), m.out_features)
            r[n].append(time.perf_counter() - t0)
    b, a = (statistics.median(r[n]) * 1000 for n in ("before", "after"))
    print(f"M={M}: before {b:.2f} after {a:.2f} ms (after/before {a/b:.3f})", flush=True)
