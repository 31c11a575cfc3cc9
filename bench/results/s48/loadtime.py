"""Time load_model(bundled, fp32 weights, --linear_backend=auto, --layer_kernels=auto) in one checkout."""
import sys, time
sys.path.insert(0, sys.argv[1])
import torch
from adaspec.models.loader import load_model, resolve_model
d = resolve_model(None, progress=False)
t0 = time.perf_counter()
cfg, model = load_model(d, torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
print(f"{sys.argv[1]} {time.perf_counter() - t0:.2f} s {model.linear_backend}")
