"""Print the MTP draft step's B = 1 cost table (ms at k = 0..5) as bench/adaptive.py's mtp_step engine calibrates it."""
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import common
common.setup_threads(1)
cfg = {"version": 1, "calibration": {"contexts": [{"prefill_tokens": 192, "min_kv_length": 1, "max_kv_length": 512}],
       "warmup_steps": 2, "window_steps": 8, "windows_per_point": 3, "request_buckets": [1]}}
f = Path(tempfile.mkdtemp()) / "step.json"; f.write_text(json.dumps(cfg))
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 1
for _ in range(reps):
    llm = common.build_llm("float32", "MTP", 5, None, max_seqs=1, max_model_len=1024, enable_adaptive_draft_step=True,
                           adaptive_draft_step_config=str(f), graph_decode_batch_sizes=(1,))
    t = llm.engine.control.table
    print([round(t.cost_ms(1, k), 2) for k in range(6)], flush=True)
    del llm
