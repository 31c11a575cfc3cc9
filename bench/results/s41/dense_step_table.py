"""Stop 41: the draft-step cost table of the bundled MTP draft at request buckets 1, 2, 3, 4, 6, 8 (k = 0..3),
from the bench's calibration windows: is pricing a batch at the bucket above it right, and is linear
interpolation between the CPU default buckets (1, 4, 16) close? OMP_NUM_THREADS=1 taskset -c 1 python
bench/results/s41/dense_step_table.py"""
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import common
buckets = [1, 2, 3, 4, 6, 8]
wd = Path(tempfile.mkdtemp())
cfg = wd / "c.json"
cfg.write_text(json.dumps({"version": 1, "calibration": {"request_buckets": buckets,
    "contexts": [{"prefill_tokens": 192, "min_kv_length": 1, "max_kv_length": 512}],
    "warmup_steps": 2, "window_steps": 8, "windows_per_point": 3}}))
llm = common.build_llm("float32", "MTP", 3, None, max_seqs=8, max_model_len=1024, enable_adaptive_draft_step=True,
                       adaptive_draft_step_config=str(cfg), graph_decode_batch_sizes=tuple(buckets))
t = llm.engine.control.table
print("bucket  " + "  ".join(f"k{k}" for k in range(4)) + "   ratios to k0")
for b in buckets:
    c = [t.cost_ms(b, k) for k in range(4)]
    print(b, " ".join(f"{x:7.2f}" for x in c), " ".join(f"{x / c[0]:.3f}" for x in c))
print(json.dumps(t.to_dict()["points"])[:3000])
