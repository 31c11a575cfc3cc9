"""Same process, same table: the sync gate reading the newest round (GATE_REQUESTS = 1, the rule before) against the
newest rounds holding 16 request-rounds, DSpark w = 7 sync at B = 1, held-out prompts, 256 tokens, repeats alternating."""
import os, sys, tempfile
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, os.environ.get("GATE_CHECKOUT", "/work/s59/gate"))  # a checkout of 75c96ec (the window's commit)
from bench import common
from bench.adaptive_calibration import write_calibration_files
import adaspec.adaptive.verify_controller as vc
common.setup_threads(1)
src = sys.argv[1]
ns = SimpleNamespace(calibration_json=None, batch_sizes=[1], max_model_len=1024, sources=[src], num_prompts=4,
                     prompt_tokens=192, alt_step_policy="{}")
files = write_calibration_files(ns, Path(tempfile.mkdtemp()))
d = common.build_llm("float32", "DSpark", 7, None, max_seqs=1, max_model_len=1024, enable_adaptive_target_verify=True,
                     adaptive_target_verify_calibration=str(files["dspark7"]), graph_decode_batch_sizes=(1,))
p = common.build_llm("float32", "none", None, None, max_seqs=1, max_model_len=1024)
sets = common.warmed_prompt_sets({"d": d, "p": p}, ns)
res = {1: [], 16: [], "plain": []}
for rep in range(3):
    for g in ((1, 16, "plain") if rep % 2 == 0 else ("plain", 16, 1)):
        if g == "plain":
            r = common.serve(p, sets[src][:4], 1, 256, ignore_eos=True)
            res[g].append(r.tokens / r.cpu_s)
            continue
        vc.GATE_REQUESTS = g
        d.engine.control.reset()
        r = common.serve(d, sets[src][:4], 1, 256, ignore_eos=True)
        s = d.engine.control.summary()
        res[g].append(r.tokens / r.cpu_s)
        print(f"rep {rep} gate {g}: {r.tokens / r.cpu_s:.1f} tok/s, skipped {s['skipped_draft']} of {s['rounds']}", flush=True)
pl = res["plain"]
for g in (1, 16):
    print(f"{src} gate {g}: x plain " + ", ".join(f"{a / b:.3f}" for a, b in zip(res[g], pl)))
