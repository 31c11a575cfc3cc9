import sys, time, statistics
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.models.loader import load_model, resolve_model
from adaspec.models.linear import Fp16wLinear
torch.set_num_threads(1)
cfg, target = load_model(resolve_model(None), torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
mods = [m for m in target.modules() if isinstance(m, Fp16wLinear) and m.native_gemm is not None]
xs = {k: torch.randn(32, k) for k in {m.in_features for m in mods}}
filler = torch.randn(4, 4096)
def run(kind, M, gap):
    for m in mods:
        x = xs[m.in_features][:M]
        m.native_gemm(x) if kind == "n" else m._fbgemm(x)
        if gap:
            for _ in range(gap): torch.nn.functional.silu(filler)
for gap in (0, 3):
    for M in (1, 2, 3):
        r = []
        for rep in range(7):
            t = {}
            for kind in (("f", "n") if rep % 2 == 0 else ("n", "f")):
                t0 = time.perf_counter(); run(kind, M, gap); t[kind] = time.perf_counter() - t0
            r.append(t["f"] / t["n"])
        print(f"gap {gap} M={M} fbgemm/native median {statistics.median(r):.3f} ({', '.join(f'{x:.2f}' for x in r)})", flush=True)
