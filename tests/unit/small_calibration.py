"""The small start-up calibration the engine-level adaptive tests share (tiny target, buckets 1/2/4)."""

from __future__ import annotations

import json
from pathlib import Path

CAL = {"request_buckets": [1, 2, 4], "contexts": [{"prefill_tokens": 8, "min_kv_length": 1, "max_kv_length": 300}],
       "warmup_steps": 1, "window_steps": 2, "windows_per_point": 1, "token_seed": 3}


def calibration_files(d: Path) -> tuple[Path, Path]:
    """(adaptive verify calibration file, adaptive draft step config file) written into `d`."""
    verify, step = d / "verify.json", d / "step.json"
    verify.write_text(json.dumps(CAL))
    step.write_text(json.dumps({"version": 1, "policy": {"window_size": 4, "update_interval": 2}, "calibration": CAL}))
    return verify, step
