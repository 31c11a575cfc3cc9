import sys, time, statistics, ctypes
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.models.loader import load_model, resolve_model
from adaspec.models.linear import Fp16wLinear
torch.set_num_threads(1)
cfg, target = load_model(resolve_model(None), torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
mods = [m for m in target.modules() if isinstance(m, Fp16wLinear) and m.native_gemm is not None]
lib = ctypes.CDLL(__import__("os").environ.get("VARIANTS_SO", "kernel_variants.so"))
P, I = ctypes.c_void_p, ctypes.c_int64
lib.vgemm.argtypes = [ctypes.c_int, P, I, I, P, I, P]
xs = {k: torch.randn(16, k) for k in {m.in_features for m in mods}}
ys = {m.out_features: torch.empty(16, m.out_features) for m in mods}
# a "draft": separate random fp16 weights of ~18 MB, run with FBGEMM at M=1
drafts = [Fp16wLinear(torch.randn(1536, 576) * 0.02, None) for _ in range(10)]
dx = torch.randn(1, 576)
def target_pass(v, M):
    for m in mods:
        lib.vgemm(v, xs[m.in_features].data_ptr(), M, m.in_features, m.native_gemm.packed.data_ptr(), m.out_features, ys[m.out_features].data_ptr())
def draft_pass():
    for d in drafts: d(dx)
res = {}
for rep in range(9):
    for v in (17, 40, 41, 42):
        for M in (2, 3):
            draft_pass()
            t0 = time.perf_counter(); target_pass(v, M); t1 = time.perf_counter(); draft_pass(); t2 = time.perf_counter()
            res.setdefault((v, M), []).append((t1 - t0, t2 - t1))
for (v, M), r in res.items():
    print(v, M, f"target {1000*statistics.median(a for a, _ in r):.2f} ms, draft after {1000*statistics.median(b for _, b in r):.3f} ms")
t = []
for _ in range(9):
    draft_pass(); t0 = time.perf_counter(); draft_pass(); t.append(time.perf_counter() - t0)
print("draft warm (L3/L2)", f"{1000*statistics.median(t):.3f}")
