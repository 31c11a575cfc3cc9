"""Stop 46: why the draft step runs k = 0 at B = 1: serve a stream's 4 prompts one at a time (as the cell does) and print
each request's k sequence, the decisions that enter or leave k = 0, and the k histogram; argv: the checkout to import,
stream, temperature.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s46/k0_b1.py . code 0.8
"""
import collections, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common
from adaspec.sampling_params import SamplingParams
src, temp = sys.argv[2], float(sys.argv[3])
common.setup_threads(1); common.share_target_weights()
bargs = adaptive.parse_args(["--configs=plain,mtp_step", "--batch_sizes=1", "--dtypes=float32", f"--sources={src}",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
e = engines["mtp_step"].engine; ctl = e.control.step
print("table B=1:", {k: round(c, 2) for k, c in ctl.costs.bucket(1)[0].items()})
prompts = common.prompt_sets(engines["plain"].tokenizer, [src], 4, bargs.prompt_tokens, bargs.chat_template)[src]
ks = []
for i, p in enumerate(prompts[:4]):
    e.add_request(list(p.ids), SamplingParams(temperature=temp, seed=i, max_tokens=256, ignore_eos=True))
    n0 = len(ctl.decisions)
    while e.has_unfinished():
        h0 = dict(ctl.k_histogram); e.step(); h1 = ctl.k_histogram
        ks += [k for k in h1 if h1[k] != h0.get(k, 0)]
    print(f"request {i}: k sequence", "".join(map(str, ks[-260:])))
    for d in list(ctl.decisions)[n0 - len(ctl.decisions):] if len(ctl.decisions) > n0 else []:
        if d.k == 0 or d.previous_k == 0:
            pr = {k: round(v, 4) for k, v in d.predicted.items()}
            op = {k: round(v, 4) for k, v in d.optimistic.items()}
            print(f"  completed {d.completed} {d.previous_k}->{d.k} {d.reason} gain {d.gain} predicted {pr} optimistic {op}")
print(dict(collections.Counter(ks)), e.control.summary())
