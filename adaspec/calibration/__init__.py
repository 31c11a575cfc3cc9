"""Start-up calibration: cost models, configuration, saved cost tables (R-F1..R-F7, R-G1..R-G3, R-C3, R-C5).

Pure pieces only (numpy + pydantic); the engine drives the measurements (`adaspec.engine.calibrate`).
`plot` is imported on demand (matplotlib is optional).
"""

from .config import (
    DRAFT_STEP_FLAG,
    FALLBACK_NOTE,
    GREEDY_NOTE,
    SOURCE_BUILTIN,
    VERIFY_FLAG,
    CalibrationConfigError,
    ContextRange,
    DraftStepCalibration,
    DraftStepConfig,
    DraftStepPolicy,
    EffectiveCalibration,
    EngineFacts,
    VerifyCalibrationConfig,
    load_draft_step_config,
    load_verify_calibration,
    parse_draft_step_config,
    parse_verify_calibration,
    resolve_draft_step_config,
    resolve_verify_calibration,
    unified_bindings,
    worst_case_progress_tokens,
)
from .cost_models import (
    AdditiveModel,
    CostModel,
    SpsModel,
    fit_model,
    model_from_dict,
)
from .cost_points import CostModelError, CostPoint
from .heldout import HeldoutReport, heldout_error
from .cost_table import (
    OUTPUT_FLAG,
    TABLE_FLAG,
    CostTable,
    CostTableCompatibilityError,
    CostTableError,
    TableCompat,
    TableMetadata,
)

__all__ = [
    "AdditiveModel", "CalibrationConfigError", "ContextRange", "CostModel", "CostModelError", "CostPoint",
    "CostTable", "CostTableCompatibilityError", "CostTableError", "DRAFT_STEP_FLAG", "DraftStepCalibration",
    "DraftStepConfig", "DraftStepPolicy", "EffectiveCalibration", "EngineFacts", "FALLBACK_NOTE", "GREEDY_NOTE",
    "HeldoutReport", "OUTPUT_FLAG", "SOURCE_BUILTIN", "SpsModel", "TABLE_FLAG", "TableCompat", "TableMetadata",
    "VERIFY_FLAG", "VerifyCalibrationConfig", "fit_model", "heldout_error", "load_draft_step_config",
    "load_verify_calibration", "model_from_dict", "parse_draft_step_config", "parse_verify_calibration",
    "resolve_draft_step_config", "resolve_verify_calibration", "unified_bindings", "worst_case_progress_tokens",
]
