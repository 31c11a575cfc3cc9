"""Stop 45: where the rest of a plain-floor round goes (outside the forward) in the draft step's engine against a plain
engine: the round runner's sampling helpers, the refresh bookkeeping and Python's garbage collector, per round.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s45/k0_rest.py mixed 4 2
"""
import collections
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import adaptive, common
from adaspec.runner import round_runner as rr
from adaspec.sampling_params import SamplingParams
src, B, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
common.setup_threads(1); common.share_target_weights()
bargs = adaptive.parse_args(["--configs=plain,mtp_step", f"--batch_sizes={B}", "--dtypes=float32", f"--sources={src}",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
T = collections.defaultdict(float); N = collections.Counter()
current = [None]
def wrap_global(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        c = time.perf_counter(); r = f(*a, **k); T[current[0], name] += time.perf_counter() - c; N[current[0], name] += 1; return r
    setattr(mod, name, g)
for name in ("sample", "row_generators"):
    wrap_global(rr, name)
from_params = rr.SamplingTensors.from_params  # bound to the class
def timed_from_params(*a, **k):
    c = time.perf_counter(); r = from_params(*a, **k)
    T[current[0], "from_params"] += time.perf_counter() - c; N[current[0], "from_params"] += 1; return r
rr.SamplingTensors.from_params = staticmethod(timed_from_params)
gc_t = [0.0]
def gc_cb(phase, info):
    if phase == "start": gc_t[0] = time.perf_counter()
    else: T[current[0], f"gc gen{info['generation']}"] += time.perf_counter() - gc_t[0]; N[current[0], f"gc gen{info['generation']}"] += 1
gc.callbacks.append(gc_cb)
prompts = common.prompt_sets(engines["plain"].tokenizer, [src], max(4, B), bargs.prompt_tokens, bargs.chat_template)[src]
rounds = collections.Counter()
for rep in range(reps):
    for name in (["plain", "mtp_step"] if rep % 2 == 0 else ["mtp_step", "plain"]):
        current[0] = name; e = engines[name].engine
        [e.add_request(list(p.ids), SamplingParams(temperature=0, max_tokens=256, ignore_eos=True)) for p in prompts[:B]]
        while e.has_unfinished(): e.step(); rounds[name] += 1
for k in sorted(T, key=str): print(k, N[k], f"{1000 * T[k] / rounds[k[0]]:.4f} ms per round", f"{T[k]:.3f} s")
print(dict(rounds))
