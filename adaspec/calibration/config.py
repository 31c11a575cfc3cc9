"""Calibration configuration files, their defaults and their validation (R-F3, R-F4, R-F5, R-F7, R-C5, R-D6).

The public names live in four files by responsibility; this module re-exports them, so
`from adaspec.calibration.config import ...` keeps working:

* `schema.py`  -- the pydantic schemas of both JSON files, the R-F3 defaults, the error type;
* `files.py`   -- reading a file and translating pydantic's errors (field as a JSON path + fix);
* `facts.py`   -- `EngineFacts` (what the engine prepared) and `EffectiveCalibration`;
* `resolve.py` -- combining a file with the facts: defaults filled in, R-F4/R-F5 checked before
  any sampling;
* `report.py`  -- the R-F7 start-up log block.

Every error is a `CalibrationConfigError` (a `UserError`) whose message names the source (flag and
file), the field as a JSON path (`contexts[1].max_kv_length`) and the fix.
"""

from __future__ import annotations

from .facts import EffectiveCalibration, EngineFacts, Mode, compact_json, mode_axis, worst_case_progress_tokens
from .files import (load_draft_step_config, load_verify_calibration, parse_draft_step_config,
                    parse_verify_calibration)
from .resolve import resolve_draft_step_config, resolve_verify_calibration, unified_bindings
from .schema import (DEFAULT_MAX_KV, DEFAULT_MAX_REQUEST_BUCKET, DEFAULT_MIN_KV, DEFAULT_MODEL,
                     DEFAULT_PREFILL_TOKENS, DEFAULT_TOKEN_SEED, DEFAULT_WARMUP_STEPS, DEFAULT_WINDOW_STEPS,
                     DEFAULT_WINDOWS_PER_POINT, DRAFT_STEP_DEFAULT_MODEL, DRAFT_STEP_FLAG, FALLBACK_NOTE, GREEDY_NOTE,
                     IN_FLIGHT_ROUNDS, NEW_SWITCH, OLD_SWITCHES, SOURCE_BUILTIN, VERIFY_FLAG, CalibrationConfigError,
                     ContextRange, DraftStepCalibration, DraftStepConfig, DraftStepPolicy, VerifyCalibrationConfig,
                     find_old_switch)

__all__ = [
    "CalibrationConfigError", "ContextRange", "VerifyCalibrationConfig", "DraftStepPolicy", "DraftStepCalibration",
    "DraftStepConfig", "EngineFacts", "EffectiveCalibration", "load_verify_calibration", "load_draft_step_config",
    "parse_verify_calibration", "parse_draft_step_config", "resolve_verify_calibration",
    "resolve_draft_step_config", "worst_case_progress_tokens", "unified_bindings", "find_old_switch",
    "VERIFY_FLAG", "DRAFT_STEP_FLAG", "GREEDY_NOTE", "FALLBACK_NOTE", "SOURCE_BUILTIN", "compact_json", "mode_axis",
    "Mode", "DEFAULT_MAX_KV", "DEFAULT_MAX_REQUEST_BUCKET", "DEFAULT_MIN_KV", "DEFAULT_MODEL",
    "DEFAULT_PREFILL_TOKENS", "DEFAULT_TOKEN_SEED", "DEFAULT_WARMUP_STEPS", "DEFAULT_WINDOW_STEPS",
    "DEFAULT_WINDOWS_PER_POINT", "DRAFT_STEP_DEFAULT_MODEL", "IN_FLIGHT_ROUNDS", "NEW_SWITCH", "OLD_SWITCHES",
]
