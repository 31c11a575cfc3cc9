"""Checks `serve` runs before any model work (issue 9, fix 4; ground rule 4).

The engine checks these files only while it starts (after model load, warm-up, or even after the
whole calibration for the output path); for a server that would mean binding the port, warming up
and only then failing. Each check here needs no model. A saved table's compatibility with the
engine (weights fingerprint, dtype, ...) needs the loaded model and draft, so it stays at start-up
(still one line and exit status 2). The validation helper's edge layer (issue 8) generalises this
for every command; this module only covers what the server needs.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config import EngineConfig


def check_before_model_work(config: EngineConfig) -> None:
    from ..calibration.cost_table import CostTable, CostTableError, _exists_error

    out = config.adaptive_target_verify_cost_table_output
    if out:
        p = Path(out)
        if not p.parent.is_dir():
            raise CostTableError(f"--adaptive_target_verify_cost_table_output={p}: directory {str(p.parent)!r} does "
                                 f"not exist. Fix: create it first (mkdir -p {p.parent}) or choose another path",
                                 param="--adaptive_target_verify_cost_table_output")
        if p.exists() or p.is_symlink():
            err = _exists_error(p)
            err.param = "--adaptive_target_verify_cost_table_output"
            raise err
    if config.adaptive_target_verify_calibration:
        from ..calibration.config import load_verify_calibration

        load_verify_calibration(config.adaptive_target_verify_calibration)
    if config.adaptive_draft_step_config:
        from ..calibration.config import load_draft_step_config

        load_draft_step_config(config.adaptive_draft_step_config)
    table = config.adaptive_target_verify_cost_table
    if table:
        flag = "--adaptive_target_verify_cost_table"
        p = Path(table)
        if not p.is_file():
            raise CostTableError(f"{flag}={p}: file does not exist. Fix: pass a table written by "
                                 "--adaptive_target_verify_cost_table_output, or drop the flag to calibrate",
                                 param=flag)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise CostTableError(f"{flag}={p}: not a readable JSON cost table ({e})", param=flag) from None
        CostTable.from_dict(data, str(p))  # structure and format version; compatibility at start-up
