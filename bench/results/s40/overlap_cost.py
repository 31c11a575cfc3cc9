"""Stop 40: what --enable_schedule_overlap costs a plain engine on one pinned core (mixed stream, B = 16, 256 tokens).

Two plain engines sharing the target, one with the overlap worker thread, served alternately; process CPU
time per run (both threads) and wall time.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s40/overlap_cost.py 16 3
"""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from adaspec import LLM, SamplingParams  # noqa: E402
from bench import common  # noqa: E402

B, REPS = int(sys.argv[1]), int(sys.argv[2])
common.setup_threads(1)
common.share_target_weights()
engines = {name: LLM(None, max_seqs_per_batch=B, enable_schedule_overlap=overlap)
           for name, overlap in (("plain", False), ("plain+overlap", True))}
prompts = common.prompt_sets(engines["plain"].engine.tokenizer, ["mixed"], B, 192, "auto")["mixed"]
times = {n: [] for n in engines}
walls = {n: [] for n in engines}
outs = {}
for rep in range(REPS + 1):  # the first pair warms up
    for name in (list(engines) if rep % 2 == 0 else list(engines)[::-1]):
        e = engines[name].engine
        c, w = time.process_time(), time.perf_counter()
        ids = [e.add_request(list(p.ids), SamplingParams(temperature=0, max_tokens=256, ignore_eos=True)) for p in prompts]
        done = {}
        while e.has_unfinished():
            for o in e.step():
                if o.finished:
                    done[o.request_id] = list(o.token_ids)
        if rep:
            times[name].append(time.process_time() - c)
            walls[name].append(time.perf_counter() - w)
        outs[name] = [done[i] for i in ids]
for n in engines:
    print(f"{n}: CPU s {[round(t, 2) for t in times[n]]}, wall s {[round(t, 2) for t in walls[n]]}")
ratio = [a / b for a, b in zip(times["plain"], times["plain+overlap"])]
print(f"plain+overlap x plain (CPU): per repeat {[round(r, 3) for r in ratio]}, median {statistics.median(ratio):.3f}; "
      f"outputs equal: {outs['plain'] == outs['plain+overlap']}")
