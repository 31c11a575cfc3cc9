"""Interleaved per-round times by (config, k, rows) at B = 1: does a k = 1 round of the step engine cost what a k1 round costs?"""
import sys, tempfile, time, statistics
from collections import defaultdict, Counter
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
src, temp, reps = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_k1,mtp_step", "--batch_sizes=1", "--dtypes=float32", f"--sources={src}",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", f"--temperature={temp}", "--k_max=3", "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
per = defaultdict(list)
orig_step = il._Stream.step
def step(self):
    st = self.engine.control.step if self.engine.control is not None else None
    h0 = Counter(st.k_histogram) if st else None
    n0 = len(self.rec.rows)
    t = time.perf_counter(); orig_step(self); dt = time.perf_counter() - t
    k = next(iter((Counter(st.k_histogram) - h0).elements()), None) if st else None
    rows = self.rec.rows[-1] if len(self.rec.rows) > n0 else None
    per[(self.name, k, rows)].append(dt)
il._Stream.step = step
for rep in range(reps):
    order = bargs.configs if rep % 2 == 0 else bargs.configs[::-1]
    llms = {n: engines[n] for n in order}
    orig_init = il._Stream.__init__
    names = iter(order)
    def init(self, *a, _o=orig_init, **k):
        _o(self, *a, **k); self.name = next(names)
    il._Stream.__init__ = init
    runs = il.serve_interleaved(llms, sets[src][:4], 1, 256, True, temp)
    il._Stream.__init__ = orig_init
    print(rep, {n: round(r.tokens / r.wall_s, 1) for n, r in runs.items()}, flush=True)
for key in sorted(per, key=str):
    v = per[key]
    if len(v) > 5:
        print(key, len(v), f"median {1000*statistics.median(v):.3f} ms  mean {1000*statistics.mean(v):.3f}  trimmed-mean {1000*statistics.mean(sorted(v)[:int(len(v)*0.95)]):.3f}")
