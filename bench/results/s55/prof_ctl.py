"""cProfile of the draft step engine serving the mixed stream at batch B (one warm run, then one profiled);
prints the controller's functions by cumulative time. usage: prof_ctl.py <checkout> B"""
import sys, tempfile, cProfile, pstats, io
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
B = int(sys.argv[2])
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=mtp_step", f"--batch_sizes={B}", "--dtypes=float32", "--sources=mixed",
                             f"--num_prompts={max(4, B)}", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5",
                             "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
ctl = engines["mtp_step"].engine.control
import os
SKEW = float(os.environ.get("SKEW", "1"))
t = ctl.table; o = t.cost_ms
object.__setattr__(t, "cost_ms", lambda bcap, x, kv_len=None: (None if (c := o(bcap, x, kv_len)) is None else c * (SKEW if x >= 1 else 1.0)))
ctl.reset()
ctl.reset(); il.serve_interleaved(engines, sets["mixed"][:max(4, B)], B, 256, True, 0.0)
ctl.reset()
pr = cProfile.Profile(); pr.enable()
runs = il.serve_interleaved(engines, sets["mixed"][:max(4, B)], B, 256, True, 0.0)
pr.disable()
print({n: round(x.tokens / x.cpu_s, 2) for n, x in runs.items()}, ctl.summary())
s = io.StringIO(); ps = pstats.Stats(pr, stream=s).sort_stats(os.environ.get("SORT", "cumulative")); ps.print_stats("adaptive|control|feedback|batch_acc|closed", 45)
print(s.getvalue())
