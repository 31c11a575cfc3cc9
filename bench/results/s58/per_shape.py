import sys, time, statistics
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.models.loader import load_model, resolve_model
from adaspec.models.linear import Fp16wLinear
torch.set_num_threads(1)
cfg, target = load_model(resolve_model(None), torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
mods = [m for m in target.modules() if isinstance(m, Fp16wLinear) and m.native_gemm is not None]
xs = {k: torch.randn(8, k) for k in {m.in_features for m in mods}}
t = {}
for rep in range(5):
    for M in (1, 2, 3, 4):
        for kind in ("f", "n"):
            for m in mods:
                x = xs[m.in_features][:M]
                t0 = time.perf_counter()
                m.native_gemm(x) if kind == "n" else m._fbgemm(x)
                t.setdefault((M, kind, (m.out_features, m.in_features)), []).append(time.perf_counter() - t0)
shapes = sorted({k[2] for k in t})
for s in shapes:
    print(s, " ".join(f"M{M}: f {1000*statistics.median(t[(M,'f',s)]):.3f} n {1000*statistics.median(t[(M,'n',s)]):.3f}" for M in (1,2,3,4)))
