"""Draft step cost at B = 1 on this machine, and a torch.profiler breakdown of one k = 3 call."""
import statistics, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from adaspec.drafts.base import DraftBatch
from adaspec.drafts.factory import load_drafter, ready_drafter
from adaspec.models.attention import build_layout
from adaspec.models.loader import load_model, resolve_model, weights_fingerprint
from adaspec.runner.kv_cache import KVCache
NS, L, REPS = 4, 300, 41
class F: enable_schedule_overlap, num_draft_tokens, max_seqs_per_batch = False, 3, NS
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
draft = load_drafter(None, "mtp", target, cfg, "cpu", torch.float32, target_fingerprint=weights_fingerprint(md))
ready_drafter(draft, F(), target.linear_backend, L + 64, target.layer_kernels)
H = cfg.hidden_size
for s in range(NS):
    draft.draft(DraftBatch([s], [0], [L - 1], torch.randn(L - 1, H), ids[s * L + 1:(s + 1) * L], 0))
def tr(B, r):
    h, _ = target(ids[:B * r], build_layout(list(range(B)), [L] * B, [r] * B, native=native), kv)
    target.logits(h)
def dc(B, k):
    draft.draft(DraftBatch(list(range(B)), [L - 2] * B, [1] * B, torch.randn(B, H), ids[:B], k))
for B in (1, 4):
    t = [med(lambda: tr(B, r)) for r in (1, 2, 3, 4)]
    d = [med(lambda: dc(B, k)) for k in range(6)]
    print(B, "target", [f"{x:.2f}" for x in t], "draft", [f"{x:.2f}" for x in d], flush=True)
x = torch.randn(1, H)
head = lambda: draft.head_logits(x)
print("head B1", f"{med(head):.3f}")
lay = lambda: draft.layer
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(20): dc(1, 3)
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
