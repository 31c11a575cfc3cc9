import sys, time, statistics, ctypes
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.models.loader import load_model, resolve_model
from adaspec.models.linear import Fp16wLinear
torch.set_num_threads(1)
cfg, target = load_model(resolve_model(None), torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
mods = [m for m in target.modules() if isinstance(m, Fp16wLinear) and m.native_gemm is not None]
assert all(m.out_features % 32 == 0 for m in mods)
lib = ctypes.CDLL(__import__("os").environ.get("VARIANTS_SO", "kernel_variants.so"))
P, I = ctypes.c_void_p, ctypes.c_int64
lib.vgemm.argtypes = [ctypes.c_int, P, I, I, P, I, P]
xs = {k: torch.randn(16, k) for k in {m.in_features for m in mods}}
ys = {m.out_features: torch.empty(16, m.out_features) for m in mods}
variants = [int(v) for v in sys.argv[1].split(",")]
Ms = [int(v) for v in sys.argv[2].split(",")]
def run(v, M):
    for m in mods:
        x = xs[m.in_features]
        if v == -2:
            m._fbgemm(x[:M])
        elif v < 0:
            m.native_gemm(x[:M])
        else:
            lib.vgemm(v, x.data_ptr(), M, m.in_features, m.native_gemm.packed.data_ptr(), m.out_features, ys[m.out_features].data_ptr())
# bits
for v in variants:
    for M in Ms:
        for m in mods[:6] + mods[-1:]:
            x = xs[m.in_features][:M].contiguous()
            ref = m.native_gemm(x)
            y = torch.empty(M, m.out_features)
            lib.vgemm(v, x.data_ptr(), M, m.in_features, m.native_gemm.packed.data_ptr(), m.out_features, y.data_ptr())
            assert torch.equal(y, ref), (v, M)
print("bits ok")
for M in Ms:
    res = {v: [] for v in [-2, -1] + variants}
    for rep in range(21):
        for v in res:
            t0 = time.perf_counter(); run(v, M); res[v].append(time.perf_counter() - t0)
    print(M, " ".join(f"v{v}:{1000*statistics.median(t):.2f}" for v, t in res.items()), flush=True)
