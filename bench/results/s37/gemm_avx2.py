"""fp16w products on this CPU: FBGEMM vs adaspec's kernel (gemm.cpp) at 1-192 rows, row independence of the kernel and its
error against float64 (stop 37; the AVX2 path). Ratios > 1: the kernel is faster. Run:
    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s37/gemm_avx2.py
"""
import sys, time, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from adaspec.models import native_gemm as ng
from adaspec.models.linear import Fp16wLinear, row_independent
for shape in [(1536, 576), (576, 1536), (49152, 576)]:
    w = torch.randn(*shape) * shape[1] ** -0.5
    m = Fp16wLinear(w, None)
    nat = ng.NativeF16w(m.weight16.float(), *reversed(ng._functions()))
    ok = row_independent(nat, shape[1], sizes=tuple(range(2, 41)))
    x = torch.randn(40, shape[1]); err = (nat(x).double() - x.double() @ m.weight16.double().t()).abs().max().item()
    out = []
    for M in (1, 2, 3, 4, 6, 8, 16, 192):
        xm = torch.randn(M, shape[1])
        r = {}
        for name, fn in (("fb", m._fbgemm), ("nat", nat)):
            best = 1e9
            for _ in range(5 if shape[0] < 40000 else 2):
                t0 = time.perf_counter(); [fn(xm) for _ in range(3)]; best = min(best, (time.perf_counter() - t0) / 3)
            r[name] = best
        out.append(f"M{M}: {r['fb']/r['nat']:.2f}")
    print(shape, "RI", ok, f"err {err:.1e}", "fbgemm/native speed:", " ".join(out), flush=True)
