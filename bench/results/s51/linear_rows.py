"""ms of every target linear (and the LM head) at M = 1..8 rows, fp16w backend, one thread (medians of 15)."""
import sys, time, torch, statistics
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
from bench import common
common.setup_threads(1)
llm = common.build_llm("float32", "MTP", 3)
from adaspec.models.linear import PackedLinear
mods = [m for n, m in llm.engine.model.named_modules() if isinstance(m, PackedLinear) and "lm_head" not in n]
head = [m for n, m in llm.engine.model.named_modules() if "lm_head" in n and isinstance(m, torch.nn.Module) and not list(m.children())]
print(len(mods), [type(m).__name__ for m in mods[:4]], [type(h).__name__ for h in head])
ins = []
for m in mods + head:
    K = m.dense_weight().shape[1]
    ins.append(K)
times = {M: [] for M in range(1, 9)}
xs = {M: [torch.randn(M, K) for K in ins] for M in range(1, 9)}
with torch.inference_mode():
    for rep in range(15):
        for M in range(1, 9):
            t0 = time.perf_counter()
            for m, x in zip(mods + head, xs[M]):
                m(x)
            times[M].append(time.perf_counter() - t0)
base = statistics.median(times[1])
for M in range(1, 9):
    med = statistics.median(times[M]); print(M, f"{med*1e3:.2f} ms  x{med/base:.2f}")
