"""Stop 64: does a closed batch's laggard progress tell prose from code? Fixed DSpark L (every round drafts L per
request) at B = 4, four prompts, 256 tokens each: per round the time and the largest remaining work before and after;
over windows of 16 rounds, how fast the largest remaining work shrank per ms, against a plain run's (1 token per plain
round), and the run's speed against plain's.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s64/laggard_rate.py prose,code 1,3
"""
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common  # noqa: E402
from bench.adaptive_hooks import Hook  # noqa: E402
from types import SimpleNamespace  # noqa: E402

common.setup_threads(1)
srcs, Ls, B = sys.argv[1].split(","), [int(x) for x in sys.argv[2].split(",")], 4
ns = SimpleNamespace(batch_sizes=[B], sources=srcs, num_prompts=B, prompt_tokens=192)
f = common.build_llm("float32", "DSpark", 7, None, max_seqs=B, max_model_len=1024, graph_decode_batch_sizes=(1, 2, 4))
p = common.build_llm("float32", "none", None, None, max_seqs=B, max_model_len=1024)
sets = common.warmed_prompt_sets({"p": p, "f": f}, ns)


def traced(llm, prompts):
    """(run, [(ms, largest remaining before, after)] per decode round of four running requests)."""
    eng, rows = llm.engine, []
    step = eng.step

    def timed():
        running = [r for r in eng.scheduler.running if r.prefilled]
        before = max((r.params.max_tokens - len(r.output_token_ids) for r in running), default=None)
        t0 = time.perf_counter()
        out = step()
        ms = 1000.0 * (time.perf_counter() - t0)
        if before is not None and len(running) == B:
            after = max(r.params.max_tokens - len(r.output_token_ids) for r in running)
            rows.append((ms, before, after))
        return out

    eng.step = timed
    try:
        run = common.serve(llm, prompts, B, 256, ignore_eos=True)
    finally:
        eng.step = step
    return run, rows


for src in srcs:
    plain, prow = traced(p, sets[src][:B])
    plain_rate = len(prow) / sum(ms for ms, _, _ in prow)  # the laggard's tokens per ms when every round is plain
    for L in Ls:
        with Hook(f, "prefix", L):
            run, rows = traced(f, sets[src][:B])
        rates = []
        for i in range(0, len(rows) - 15, 16):
            w = rows[i:i + 16]
            rates.append((w[0][1] - w[-1][2]) / sum(ms for ms, _, _ in w) / plain_rate)
        same = "=plain" if run.outputs == plain.outputs else "MISMATCH"
        speed = run.tokens / run.cpu_s / (plain.tokens / plain.cpu_s)
        print(f"{src} L{L}: {speed:.3f}x plain {same}; laggard progress per ms / plain's over 16-round windows: "
              f"median {statistics.median(rates):.3f}, first three "
              + ", ".join(f"{x:.3f}" for x in rates[:3]), flush=True)
