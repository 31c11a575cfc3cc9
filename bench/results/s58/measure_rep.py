import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.models.loader import load_model, resolve_model
from adaspec.models.linear import Fp16wLinear
from adaspec.models import native_gemm as ng
torch.set_num_threads(1)
cfg, target = load_model(resolve_model(None), torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
mods = [m for m in target.modules() if isinstance(m, Fp16wLinear) and m.native_gemm is not None]
for rep in range(0):
    r = ng.measure_rows(mods, repeats=2)
    print("sample", {k: round(v, 3) for k, v in r["speedups"].items()})
ng.SAMPLE_PARAMS = 96_000_000
for rep in range(4):
    r = ng.measure_rows(mods, repeats=2)
    print("all", {k: round(v, 3) for k, v in r["speedups"].items()}, round(r["seconds"], 2))
