import sys, time, statistics
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.models.attention import build_layout
from adaspec.models.loader import load_model, resolve_model
from adaspec.models.linear import Fp16wLinear
from adaspec.runner.kv_cache import KVCache
torch.set_num_threads(1)
cfg, target = load_model(resolve_model(None), torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
mods = [m for m in target.modules() if isinstance(m, Fp16wLinear) and m.native_gemm is not None]
print("measured rows", target.native_gemm["rows"][:6])
NS, L = 4, 300
kv = KVCache(cfg.num_layers, NS, cfg.num_kv_heads, L + 64, cfg.head_dim, torch.float32)
ids = torch.randint(0, cfg.vocab_size, (NS * L,), generator=torch.Generator().manual_seed(0))
for s in range(NS):
    target(ids[s * L:(s + 1) * L], build_layout([s], [0], [L], native=True), kv)
def rnd(B, r):
    h, _ = target(ids[:B * r], build_layout(list(range(B)), [L] * B, [r] * B, native=True), kv)
    return target.logits(h)
sets = {"fbgemm<=3": frozenset(range(4, 33)), "native>=2": frozenset(range(2, 33)), "native all": frozenset(range(1, 33))}
res = {}
for rep in range(15):
    for name, rows in sets.items():
        for m in mods: m.native_rows = rows
        for B, r in ((1, 1), (1, 2), (1, 3), (1, 4), (4, 1), (4, 2)):
            t0 = time.perf_counter(); out = rnd(B, r); res.setdefault((name, B, r), []).append(time.perf_counter() - t0)
for B, r in ((1, 1), (1, 2), (1, 3), (1, 4), (4, 1), (4, 2)):
    print(f"B={B} r={r} " + " ".join(f"{n}: {1000*statistics.median(res[(n,B,r)]):.2f}" for n in sets))
