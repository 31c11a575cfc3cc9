"""Stop 40: where a plain-floor (k = 0) round of the adaptive draft step spends its time against a plain engine's round.

Both engines share the target (bench/common.share_target_weights), serve the chat stream at B = 4, 256
tokens, 4 times in alternating order; engine.step, RoundRunner.run, ModelRunner.prepare/forward and the
refresh bookkeeping (_add_entries) are timed in process CPU time per call.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s40/k0_parts.py
"""
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import adaptive, common
from adaspec.sampling_params import SamplingParams
common.setup_threads(1); common.share_target_weights()
bargs = adaptive.parse_args(["--configs=plain,mtp_step_sym", "--batch_sizes=1,4", "--dtypes=float32", "--sources=chat",
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
prompts = common.prompt_sets(engines["plain"].tokenizer, ["chat"], 4, bargs.prompt_tokens, bargs.chat_template)["chat"]
for rep in range(4):
    for name in (["plain", "mtp_step_sym"] if rep % 2 == 0 else ["mtp_step_sym", "plain"]):
        e = engines[name].engine
        [e.add_request(list(p.ids), SamplingParams(temperature=0, max_tokens=256, ignore_eos=True)) for p in prompts]
        while e.has_unfinished(): e.step()
for k in sorted(T): print(k, N[k], f"{1000*T[k]/N[k]:.3f} ms/call", f"{T[k]:.2f} s")
print(engines["mtp_step_sym"].engine.control.summary())
