"""Stop 44, throw-away: two identical plain engines (each its own weights) in one process; the share of their weights and KV on huge pages, and their CPU s per stream."""
import sys, time, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from thp import thp_fraction
from adaspec import LLM
from adaspec.sampling_params import SamplingParams
from adaspec.training.corpus import heldout_prompts
B = int(sys.argv[1]) if len(sys.argv) > 1 else 4
llms = [LLM(max_seqs_per_batch=B, max_model_len=1024) for _ in range(2)]
def tensors(obj, seen, out, depth=0):
    if depth > 14 or id(obj) in seen: return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        if obj.numel() * obj.element_size() > 65536: out.append(obj)
        return
    if isinstance(obj, torch.nn.Module):
        for t in list(obj.parameters(recurse=False)) + list(obj.buffers(recurse=False)): tensors(t, seen, out, depth+1)
        for v in vars(obj).values(): tensors(v, seen, out, depth+1)
        for m in obj.children(): tensors(m, seen, out, depth+1)
    elif isinstance(obj, (list, tuple)):
        for v in obj: tensors(v, seen, out, depth+1)
    elif isinstance(obj, dict):
        for v in obj.values(): tensors(v, seen, out, depth+1)
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("adaspec"):
        for v in vars(obj).values(): tensors(v, seen, out, depth+1)
def report():
    for i, l in enumerate(llms):
        w = []; tensors(l.engine.model, set(), w)
        kv = l.engine.kv_cache.k + l.engine.kv_cache.v
        def frac(ts):
            tot = sum(t.numel()*t.element_size() for t in ts)
            return round(sum((thp_fraction(t.data_ptr(), t.numel()*t.element_size()) or 0) * t.numel()*t.element_size() for t in ts) / tot, 3), round(tot/2**20)
        print(i, "weights thp,MB", frac(w), "kv", frac(kv), flush=True)
report()
items = heldout_prompts("chat", B)
sp = SamplingParams(max_tokens=128, temperature=0.0, ignore_eos=True)
times = {0: [], 1: []}
for rep in range(4):
    for i in ((0, 1) if rep % 2 == 0 else (1, 0)):
        t = time.process_time(); llms[i].generate([it.text for it in items], sp, chat=True); times[i].append(time.process_time() - t)
print({i: [round(x, 2) for x in v] for i, v in times.items()})
report()
