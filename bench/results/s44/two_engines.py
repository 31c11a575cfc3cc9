"""Throw-away: two plain engines sharing one target in one process (as the benches build them); per-engine CPU s
per stream, then the same with their KV caches swapped."""
import sys, time, statistics
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from bench import common
common.share_target_weights()
from adaspec import LLM
from adaspec.sampling_params import SamplingParams
from adaspec.training.corpus import heldout_prompts
B = int(sys.argv[1]); reps = int(sys.argv[2])
llms = [LLM(max_seqs_per_batch=B, max_model_len=1024) for _ in range(2)]
assert llms[0].engine.model is llms[1].engine.model
items = heldout_prompts("chat", B)
sp = SamplingParams(max_tokens=128, temperature=0.0, ignore_eos=True)
def measure(tag):
    times = {0: [], 1: []}
    for rep in range(reps):
        for i in ((0, 1) if rep % 2 == 0 else (1, 0)):
            t = time.process_time(); llms[i].generate([it.text for it in items], sp, chat=True); times[i].append(time.process_time() - t)
    m = {i: statistics.median(v) for i, v in times.items()}
    print(tag, {i: [round(x, 2) for x in v] for i, v in times.items()}, "1/0:", round(m[1] / m[0], 3), flush=True)
measure("as built")
e0, e1 = llms[0].engine, llms[1].engine
r0, r1 = e0.model_runner, e1.model_runner
r0.kv, r1.kv = r1.kv, r0.kv
e0.kv_cache, e1.kv_cache = r0.kv, r1.kv
measure("kv swapped")
