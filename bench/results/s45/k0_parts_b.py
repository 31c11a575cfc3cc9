"""Stop 45: stop 40's k0_parts.py with the stream, batch and configuration as arguments: per-call process CPU time of
engine.step and its parts (schedule, plan, collect, commit, outputs), RoundRunner.run, ModelRunner.prepare/forward
and the refresh bookkeeping in a plain engine and an adaptive
draft-step engine (shared target weights, one process, alternating order).

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s45/k0_parts_b.py mixed 8 mtp_step 4 [temperature, default 0]
"""
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import adaptive, common
from adaspec.sampling_params import SamplingParams
src, B, cfg, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
temp = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
common.setup_threads(1); common.share_target_weights()
bargs = adaptive.parse_args([f"--configs=plain,{cfg}", f"--batch_sizes={B}", "--dtypes=float32", f"--sources={src}",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
T = collections.defaultdict(float); N = collections.Counter()
def wrap(name, obj, attr):
    f = getattr(obj, attr)
    def g(*a, **k):
        c = time.process_time(); r = f(*a, **k); T[name, attr] += time.process_time() - c; N[name, attr] += 1; return r
    setattr(obj, attr, g)
for name, llm in engines.items():
    r = llm.engine.rounds
    wrap(name, r, "run"); wrap(name, r.runner, "forward"); wrap(name, r.runner, "prepare"); wrap(name, r, "_add_entries")
    wrap(name, llm.engine, "step")
    for attr in ("_schedule", "plan", "_collect", "commit", "_outputs"):
        wrap(name, llm.engine, attr)
    if llm.engine.control is not None:
        wrap(name, llm.engine.control, "plan"); wrap(name, llm.engine.control, "observe")
prompts = common.prompt_sets(engines["plain"].tokenizer, [src], max(4, B), bargs.prompt_tokens, bargs.chat_template)[src]
total = collections.defaultdict(list)
for rep in range(reps):
    for name in (["plain", cfg] if rep % 2 == 0 else [cfg, "plain"]):
        e = engines[name].engine
        c = time.process_time()
        [e.add_request(list(p.ids), SamplingParams(temperature=temp, seed=i, max_tokens=256, ignore_eos=True))
         for i, p in enumerate(prompts[:B])]
        while e.has_unfinished(): e.step()
        total[name].append(time.process_time() - c)
for k in sorted(T): print(k, N[k], f"{1000*T[k]/N[k]:.3f} ms/call", f"{T[k]:.2f} s")
for name, v in total.items(): print(name, "stream CPU s", [round(x, 2) for x in v])
print(engines[cfg].engine.control.summary())
