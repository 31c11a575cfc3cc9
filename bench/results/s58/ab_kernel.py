"""Old (HEAD 9ffc669) vs new gemm kernel in one process, interleaved round by round (stop 58).

Each arm has its own engines (plain, MTP k = 1..3 fixed) over one shared target; before each engine round the
process switches every packed product to that arm's kernel and row set. Usage:
  OMP_NUM_THREADS=1 taskset -c 0 python ab_kernel.py SOURCE B REPEATS [configs]"""
import ctypes, sys, statistics, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from bench import common
from bench.adaptive_interleaved import _Stream
import functools, gc
import torch
from adaspec.models.linear import Fp16wLinear
from adaspec.models import native_gemm as ng

source, B, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
configs = (sys.argv[4] if len(sys.argv) > 4 else "plain,1,2,3").split(",")
common.setup_threads(1)
common.share_target_weights()
old = ctypes.CDLL(__import__("os").environ["OLD_GEMM_SO"]).adaspec_gemm_f16w
old.argtypes, old.restype = ng._functions()[1].argtypes, ctypes.c_int
engines = {}
for arm in ("old", "new"):
    for c in configs:
        engines[(arm, c)] = common.build_llm("float32") if c == "plain" else common.build_llm("float32", "MTP", int(c))
mods = {id(m): m for llm in engines.values() for m in llm.engine.model.modules() if isinstance(m, Fp16wLinear)}
for llm in engines.values():
    d = llm.engine.drafter
    if isinstance(d, torch.nn.Module):
        mods.update({id(m): m for m in d.modules() if isinstance(m, Fp16wLinear)})
mods = [m for m in mods.values() if m.native_gemm is not None]
new = mods[0].native_gemm._gemm
new_rows = mods[0].native_rows
arms = {"old": (old, frozenset(range(4, 33))), "new": (new, new_rows)}
print(f"{len(mods)} packed products; new rows {sorted(new_rows)[:8]}...", flush=True)
state = [None]
def set_arm(a):
    if state[0] == a:
        return
    g, rows = arms[a]
    for m in mods:
        m.native_gemm._gemm, m.native_rows = g, rows
    state[0] = a
tok = next(iter(engines.values())).tokenizer
prompts = common.prompt_sets(tok, [source], max(4, B), 192, "auto")[source][:max(4, B)]
for key, llm in engines.items():
    set_arm(key[0]); common.serve(llm, prompts[:B], B, 4)
rates = {k: [] for k in engines}
outs = {}
for rep in range(reps):
    order = list(engines) if rep % 2 == 0 else list(engines)[::-1]
    params_of = functools.partial(common.request_params, max_tokens=256, ignore_eos=True, temperature=0.0)
    streams = {k: _Stream(engines[k], prompts, B, params_of) for k in order}
    gc.collect(); gc.disable()
    live = list(streams.items())
    while live:
        for k, s in live:
            set_arm(k[0]); s.step()
        live = [(k, s) for k, s in live if s.active]
    gc.enable()
    for k, s in streams.items():
        run = s.run(len(prompts))
        rates[k].append(run.tokens / run.cpu_s)
        outs.setdefault(k, []).append(run.outputs)
    line = " ".join(f"{a}/{c}:{rates[(a, c)][-1]:.1f}" for a, c in engines)
    print(f"rep {rep}: {line}", flush=True)
print("| config | old tok/s | new tok/s | new/old per repeat (median) | old x plain | new x plain |")
for c in configs:
    o, n = rates[("old", c)], rates[("new", c)]
    po, pn = rates[("old", "plain")], rates[("new", "plain")]
    r = [b / a for a, b in zip(o, n)]
    print(f"| {c} | {statistics.median(o):.1f} | {statistics.median(n):.1f} | {', '.join(f'{x:.3f}' for x in r)} ({statistics.median(r):.3f}) | "
          f"{statistics.median([a / p for a, p in zip(o, po)]):.3f} | {statistics.median([a / p for a, p in zip(n, pn)]):.3f} |")
base = outs[("old", "plain")]
print("outputs equal to old plain:", {f"{a}/{c}": all(o == b for o, b in zip(v, base)) for (a, c), v in outs.items()})
