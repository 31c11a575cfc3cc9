import sys, tempfile, json, collections
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=mtp_step", "--batch_sizes=1", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5", "--interleave"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
ctl = engines["mtp_step"].engine.control
print("table B1", {k: round(ctl.table.cost_ms(1, k), 2) for k in range(6)})
runs = il.serve_interleaved(engines, sets["mixed"][:4], 1, 256, True, 0.0)
st = ctl.step
print("chosen", ctl.summary())
print(collections.Counter(d.reason for d in st.decisions))
for d in list(st.decisions):
    if d.k != d.previous_k or d.reason not in ("keep",):
        print(d.completed, d.reason, d.previous_k, "->", d.k, {k: round(v * 1000, 2) for k, v in d.predicted.items()}, None if d.gain is None else round(d.gain, 3))
print("cont", st._continuation, st.depth.continuation()); print("served", st.served.ratio(1), st.served.samples(1), st.cost_checks, st._stretched)
