"""The small start-up calibration the engine-level adaptive tests share (tiny target, buckets 1/2/4)."""

from __future__ import annotations

import dataclasses
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


class CheapSpeculation:
    """A fixed cost model for the adaptive controllers: every draft step or verify row adds
    `per_unit` (default 2%) to a 1 ms round, so speculating pays at any acceptance a test drafter gives."""

    def __init__(self, per_unit: float = 0.02):
        self.per_unit = per_unit

    def cost_ms(self, bcap: int, x: int) -> float:
        return 1.0 + self.per_unit * x


def install_cheap_costs(engine, per_unit: float = 0.02) -> None:
    """Replace an adaptive engine's measured cost table (start-up still calibrates as usual) by
    CheapSpeculation, plain rounds at 1 ms, and rebuild the controllers cold. Tests that assert that
    speculation really ran use it so that the controllers' choices do not ride on the timing noise of a
    loaded CI machine: CI once saw the tiny target's measured table send the draft step to k = 0 for a
    whole run. No-op for an engine without adaptive control."""
    control = engine.control
    if control is None:
        return
    meta = control.table.metadata
    control.table = dataclasses.replace(control.table, model=CheapSpeculation(per_unit), metadata=meta.model_copy(
        update={"plain_ms": {b: 1.0 for b in meta.request_buckets}}))
    control.reset()
