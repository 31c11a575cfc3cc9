import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.models.loader import load_model, resolve_model
from adaspec.models.linear import Fp16wLinear
from adaspec.models import native_gemm as ng
torch.set_num_threads(1)
cfg, target = load_model(resolve_model(None), torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
print("load-time", {k: round(v, 3) for k, v in target.native_gemm["speedups"].items()})
mods = [m for m in target.modules() if isinstance(m, Fp16wLinear) and m.native_gemm is not None]
for rep in range(3):
    r = ng.measure_rows(mods)
    print("again", {k: round(v, 3) for k, v in r["speedups"].items()}, round(r["seconds"], 2))
