"""Served round CPU ms against the batch's mean KV length, plain and k=1, B=4 mixed; vs the table."""
import sys, time, statistics, tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from bench import common
import bench.step_cost_check as scc
B = int(sys.argv[1]) if len(sys.argv) > 1 else 4
args = scc.parse_args([f"--batch_size={B}", "--k_max=2", "--max_tokens=256"])
common.setup_threads(1)
with tempfile.TemporaryDirectory() as tmp:
    llm, table, calib = scc.calibrated_costs(args, Path(tmp))
print("table", [round(t, 2) for t in table])
prompts = common.prompt_sets(llm.tokenizer, ["mixed"], B, 192, "auto")["mixed"]
print("prompt lens", [len(p.ids) for p in prompts])
common.serve(llm, prompts[:2], 2, 4, ignore_eos=True)
engine = llm.engine
from adaspec.sampling_params import SamplingParams
for k in (0, 1, 2):
    scc.force_k(llm, k)
    rows = []
    orig = engine.rounds.run
    def timed(chunks, plan):
        kv = [c.request.num_computed for c in chunks if c.is_decode]
        c = time.process_time(); r = orig(chunks, plan); rows.append((len(kv), np.mean(kv) if kv else 0, time.process_time() - c)); return r
    engine.rounds.run = timed
    for p in prompts:
        engine.add_request(list(p.ids), SamplingParams(temperature=0, max_tokens=256, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    engine.rounds.run = orig
    full = [(kv, t) for n, kv, t in rows[3:] if n == B]
    kv = np.array([a for a, _ in full]); t = 1000 * np.array([b for _, b in full])
    slope, icpt = np.polyfit(kv, t, 1)
    print(f"k={k}: n={len(full)} kv {kv.min():.0f}-{kv.max():.0f} median t {np.median(t):.2f}; fit t = {icpt:.2f} + {slope*100:.3f}/100kv; at kv=214: {icpt+slope*214:.2f}; at 300: {icpt+slope*300:.2f}")
