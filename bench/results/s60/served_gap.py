"""DSpark w = 7 sync at B = 1: served ms of drafted rounds (by padded G, after a drafted round) and plain rounds, against
the start-up table's prices. Data for pricing the sync gate as served (not a change)."""
import os, sys, tempfile, statistics
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from bench import common
from bench.adaptive_calibration import write_calibration_files
common.setup_threads(1)
srcs = sys.argv[1].split(",")
ns = SimpleNamespace(calibration_json=None, batch_sizes=[1], max_model_len=1024, sources=srcs, num_prompts=4,
                     prompt_tokens=192, alt_step_policy="{}")
files = write_calibration_files(ns, Path(tempfile.mkdtemp()))
d = common.build_llm("float32", "DSpark", 7, None, max_seqs=1, max_model_len=1024, enable_adaptive_target_verify=True,
                     adaptive_target_verify_calibration=str(files["dspark7"]), graph_decode_batch_sizes=(1,))
sets = common.warmed_prompt_sets({"d": d}, ns)
ctl = d.engine.control
log = []
orig = ctl.observe
def obs(result, round_id, plan=None, seconds=None, decode_only=False):
    if plan is not None and seconds is not None and decode_only and len(result.verify_lens) == 1:
        log.append((plan.num_steps, 1 + sum(result.verify_lens), 1000 * seconds, plan.probe))
    return orig(result, round_id, plan, seconds, decode_only)
ctl.observe = obs
for src in srcs:
    for rep in range(2):
        log.clear(); ctl.reset()
        common.serve(d, sets[src][:4], 1, 256, ignore_eos=True)
        plain = [ms for k, g, ms, p in log if k == 0]
        by = {}
        for prev, cur in zip(log, log[1:]):
            if cur[0] and prev[0] and not cur[3]:
                G = ctl.geometry.pad_rows(1, cur[1])
                by.setdefault(G, []).append(cur[2])
        pm = statistics.median(plain) if plain else float("nan")
        tp = ctl.table.plain_cost_ms(1, None)
        print(f"{src} rep {rep}: plain rounds {len(plain)} median {pm:.2f} ms (table {tp:.2f})", flush=True)
        for G in sorted(by):
            if len(by[G]) >= 3:
                print(f"   G={G}: n={len(by[G])} served/plain {statistics.median(by[G]) / pm:.3f}  table/plain "
                      f"{ctl.table.cost_ms(1, G) / tp:.3f}", flush=True)
