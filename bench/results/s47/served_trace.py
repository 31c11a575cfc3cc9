"""Stop 47: does the draft step's served ratio become known within one bench run? One process builds the bench's
`mtp_step` engine (its own calibration), serves one stream of `src` at B requests `runs` times in a row with the
controller reset before each run, as bench/adaptive.py does, then once more without the reset (a long-lived server
keeps its samples), and prints per run the chosen k, the cost checks, the served ratio samples and the decisions that
left k = 1. argv: the checkout to import, stream, B, runs.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s47/served_trace.py . chat 4 2
"""
import collections, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common
from adaspec.sampling_params import SamplingParams
src, B, runs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=mtp_step", f"--batch_sizes={B}", "--dtypes=float32", f"--sources={src}",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
llm = engines["mtp_step"]; e = llm.engine
prompts = common.prompt_sets(llm.tokenizer, [src], max(4, B), bargs.prompt_tokens, bargs.chat_template)[src]
for run in range(runs + 1):
    if run < runs:
        e.control.reset()
    s = e.control.step
    before = collections.Counter(s.k_histogram); checks0 = s.cost_checks; n0 = len(s.decisions)
    [e.add_request(list(p.ids), SamplingParams(temperature=0, max_tokens=256, ignore_eos=True)) for p in prompts[:B]]
    while e.has_unfinished():
        e.step()
    left = [(d.reason, round(d.predicted.get(1, 0) / d.predicted.get(0, 1), 3)) for d in list(s.decisions)[n0:]
            if d.previous_k == 1 and d.k == 0]
    print(f"run {run} ({'reset' if run < runs else 'kept'}): k {dict(sorted((s.k_histogram - before).items()))}, "
          f"cost checks {s.cost_checks - checks0}, samples {[round(x, 3) for x in s.served.samples(B)]}, "
          f"ratio {s.served.ratio(B)}, table k1/k0 {s.costs.bucket(s.pad_requests(B))[0][1] / s.costs.bucket(s.pad_requests(B))[0][0]:.3f}, "
          f"left k = 1 (reason, predicted k1/k0): {left}", flush=True)
