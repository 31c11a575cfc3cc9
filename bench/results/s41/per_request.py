"""Stop 41: when each request of a closed batch finishes under fixed MTP k (the bench's held-out prompts, 256 tokens, EOS ignored,
fp32, one thread): the drain that per-round throughput does not see. Usage: python bench/results/s41/per_request.py K SOURCE B"""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import common
from adaspec.sampling_params import SamplingParams
k = int(sys.argv[1]) if len(sys.argv) > 1 else 1
src = sys.argv[2] if len(sys.argv) > 2 else "mixed"
n = int(sys.argv[3]) if len(sys.argv) > 3 else 4
common.setup_threads(1)
llm = common.build_llm("float32", "MTP", k, None, max_seqs=n, max_model_len=1024)
prompts = common.prompt_sets(llm.tokenizer, [src], n, 192, "auto")[src]
e = llm.engine
ids = [e.add_request(list(p.ids), SamplingParams(temperature=0, max_tokens=256, ignore_eos=True)) for p in prompts]
rounds, done = 0, {}
while e.has_unfinished():
    outs = e.step(); rounds += 1
    for o in outs:
        if o.finished:
            done[o.request_id] = rounds
print(src, "k", k, "rounds to finish per request:", [done[i] for i in ids], "total rounds", rounds)
