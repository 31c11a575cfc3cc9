import statistics, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.models.attention import build_layout
from adaspec.models.loader import load_model, resolve_model
from adaspec.runner.kv_cache import KVCache
NS, L, REPS = 4, 300, 31
def med(fn):
    out = []
    for _ in range(REPS):
        t0 = time.perf_counter(); fn(); out.append(time.perf_counter() - t0)
    return 1000 * statistics.median(out)
torch.set_num_threads(1)
md = resolve_model(None)
cfg, target = load_model(md, torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
native = target.layer_kernels == "native"
kv = KVCache(cfg.num_layers, NS, cfg.num_kv_heads, L + 64, cfg.head_dim, torch.float32)
ids = torch.randint(0, cfg.vocab_size, (NS * L,), generator=torch.Generator().manual_seed(0))
for s in range(NS):
    target(ids[s * L:(s + 1) * L], build_layout([s], [0], [L], native=native), kv)
hs = {}
def body(B, r):
    h, _ = target(ids[:B * r], build_layout(list(range(B)), [L] * B, [r] * B, native=native), kv)
    hs[(B, r)] = h
def logits(B, r):
    target.logits(hs[(B, r)])
for B in (1, 4):
    for r in range(1, 5):
        b = med(lambda: body(B, r)); l = med(lambda: logits(B, r))
        print(f"B={B} rows/req={r} M={B*r}: body {b:.2f} ms logits {l:.2f} ms", flush=True)
from torch.profiler import profile, ProfilerActivity
for r in (1, 3):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(10): body(1, r); logits(1, r)
    print("r", r); print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
