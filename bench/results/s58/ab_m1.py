"""Plain decoding at B = 1 (and B = 2 for M = 2): FBGEMM vs the new kernel at 1 (and 2) rows, interleaved in one process."""
import sys, statistics, functools, gc
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from bench import common
from bench.adaptive_interleaved import _Stream
from adaspec.models.linear import Fp16wLinear
B, reps = int(sys.argv[1]), int(sys.argv[2])
common.setup_threads(1); common.share_target_weights()
engines = {a: common.build_llm("float32") for a in ("fbgemm", "native")}
mods = [m for m in engines["fbgemm"].engine.model.modules() if isinstance(m, Fp16wLinear) and m.native_gemm is not None]
base = frozenset(range(3, 33))
arms = {"fbgemm": base, "native": base | {1, 2}}
def set_arm(a):
    for m in mods: m.native_rows = arms[a]
tok = engines["fbgemm"].tokenizer
prompts = common.prompt_sets(tok, ["mixed"], 4, 192, "auto")["mixed"]
rates = {a: [] for a in engines}
for rep in range(reps):
    params_of = functools.partial(common.request_params, max_tokens=256, ignore_eos=True, temperature=0.0)
    order = list(engines) if rep % 2 == 0 else list(engines)[::-1]
    streams = {a: _Stream(engines[a], prompts, B, params_of) for a in order}
    gc.collect(); gc.disable()
    live = list(streams.items())
    while live:
        for a, s in live:
            set_arm(a); s.step()
        live = [(a, s) for a, s in live if s.active]
    gc.enable()
    runs = {a: s.run(len(prompts)) for a, s in streams.items()}
    for a, r in runs.items(): rates[a].append(r.tokens / r.cpu_s)
    assert runs["fbgemm"].outputs == runs["native"].outputs
    print(f"rep {rep}: " + " ".join(f"{a} {rates[a][-1]:.1f}" for a in rates), f"native/fbgemm {rates['native'][-1] / rates['fbgemm'][-1]:.3f}", flush=True)
print("median native/fbgemm", statistics.median([n / f for n, f in zip(rates["native"], rates["fbgemm"])]))
