"""Calibration configuration schemas (R-F3, R-C5, R-D6): pydantic v2 models with `extra="forbid"`.

* `--adaptive_target_verify_calibration=FILE` -> `VerifyCalibrationConfig` (R-F3): every field
  optional; omitted fields take the defaults of R-F3 (`resolve.resolve_verify_calibration`).
* `--adaptive_draft_step_config=FILE` -> `DraftStepConfig` (R-C5): `{"version": 1, "policy": {...},
  "calibration": {...}}`; either part may be omitted.

Also the R-F3 defaults, the notes of the R-F7 log, the error type, and the detection of the
renamed switches (R-D6) anywhere in a file.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import UserError

VERIFY_FLAG = "--adaptive_target_verify_calibration"
DRAFT_STEP_FLAG = "--adaptive_draft_step_config"
NEW_SWITCH = "enable_adaptive_target_verify"
OLD_SWITCHES = ("enable_adaptive_spec_prune", "enable_adaptive_speculative_decode")

# R-F3 defaults
DEFAULT_MODEL = "additive"
DRAFT_STEP_DEFAULT_MODEL = "sps"
DEFAULT_PREFILL_TOKENS = 2048
DEFAULT_MIN_KV = 1
DEFAULT_MAX_KV = 4096
DEFAULT_WARMUP_STEPS = 8
DEFAULT_WINDOW_STEPS = 32
DEFAULT_WINDOWS_PER_POINT = 3
DEFAULT_TOKEN_SEED = 1
DEFAULT_MAX_REQUEST_BUCKET = 128  # the original samples the captured request buckets up to 128 by default
IN_FLIGHT_ROUNDS = 2  # two pipeline slots may be in flight beyond the measured rounds (R-F4)

SOURCE_BUILTIN = "built-in"

GREEDY_NOTE = (
    "calibration uses greedy target requests (temperature 0), so the extra cost of random sampling "
    "is not in the cost table; measure random-target runs separately"
)
FALLBACK_NOTE = "requests in uncalibrated request buckets or KV ranges fall back to full-width admission"


class CalibrationConfigError(UserError, ValueError):
    """A calibration configuration is wrong; the message names the source, the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str, source: str | None = None):
        self.field, self.problem, self.fix, self.source = field, problem, fix, source
        prefix = f"{source}: " if source else ""
        # param: the JSON field (the flag is in `source`); "(file)" problems are the flag's
        flag = source.split("=", 1)[0] if source else None
        shown = "" if field == "(file)" else f"{field}: "
        super().__init__(f"{prefix}{shown}{problem}. Fix: {fix}", param=flag if field.startswith("(") else field)



_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


def _no_duplicates(v, what: str):
    if v is not None:
        dup = sorted({x for x in v if v.count(x) > 1})
        if dup:
            raise ValueError(f"duplicate {what} {dup}; fix: list each value once")
    return v


class ContextRange(BaseModel):
    """One context range: requests are prefilled to `prefill_tokens`, the table claims KV [min, max]."""

    model_config = _STRICT
    prefill_tokens: int = Field(ge=1)
    min_kv_length: int = Field(ge=1)
    max_kv_length: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self):
        if self.min_kv_length > self.max_kv_length:
            raise ValueError(f"min_kv_length {self.min_kv_length} is greater than max_kv_length "
                             f"{self.max_kv_length}; fix: make min_kv_length <= max_kv_length")
        return self


class _CalibrationFields(BaseModel):
    model_config = _STRICT
    model: Literal["additive", "sps"] | None = None
    request_buckets: list[int] | None = Field(None, min_length=1)
    contexts: list[ContextRange] | None = Field(None, min_length=1)
    warmup_steps: int | None = Field(None, ge=0)
    window_steps: int | None = Field(None, ge=1)
    windows_per_point: int | None = Field(None, ge=1)
    token_seed: int | None = Field(None, ge=0)

    @field_validator("request_buckets")
    @classmethod
    def _buckets(cls, v):
        if v is not None and any(b < 1 for b in v):
            raise ValueError("request buckets must be >= 1")
        return _no_duplicates(v, "request buckets")


def _reject_old_switches(data: Any) -> Any:
    hit = find_old_switch(data)
    if hit is not None:
        problem, fix = _old_switch_message(*hit)
        raise ValueError(f"{problem}; fix: {fix}")
    return data


class VerifyCalibrationConfig(_CalibrationFields):
    """`--adaptive_target_verify_calibration` (R-F3). Omitted fields take the R-F3 defaults."""

    draft_width: int | None = Field(None, ge=1)
    # per request bucket ({"8": [8, 16, 48]}) or one list restricted to each bucket's prepared rows
    target_graph_rows: Union[list[int], dict[int, list[int]], None] = None

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data):
        return _reject_old_switches(data)

    @field_validator("target_graph_rows", mode="before")
    @classmethod
    def _int_keys(cls, v):
        if isinstance(v, dict):  # JSON object keys are strings
            return {int(k) if isinstance(k, str) and k.strip().isdigit() else k: g for k, g in v.items()}
        return v

    @field_validator("target_graph_rows")
    @classmethod
    def _rows(cls, v):
        lists = [v] if isinstance(v, list) else list(v.values()) if isinstance(v, dict) else []
        for rows in lists:
            if not rows:
                raise ValueError("a list of target rows must not be empty; fix: list at least the full-width "
                                 "bucket, or omit the entry to use every prepared bucket")
            if any(g < 1 for g in rows):
                raise ValueError("target rows must be >= 1")
            _no_duplicates(rows, "target rows")
        if isinstance(v, dict) and any(b < 1 for b in v):
            raise ValueError("request bucket keys must be >= 1")
        return v


class DraftStepPolicy(BaseModel):
    """R-C2 policy of the adaptive draft step controller."""

    model_config = _STRICT
    window_size: int = Field(20, ge=1)
    update_interval: int = Field(5, ge=1)
    switch_min_gain: float = Field(0.05, ge=0.0, allow_inf_nan=False)
    # adaspec's extension (adaptive/step_controller.py): at k = 0, speculation is scored this many
    # standard errors above the window's aged acceptance when deciding to leave; 0 = R-C2's rule
    zero_confidence: float = Field(1.0, ge=0.0, le=10.0, allow_inf_nan=False)
    # adaspec's plain floor: a k >= 1 predicted slower than plain is left inside switch_min_gain too
    plain_floor: bool = True
    # adaspec's extension: the plain floor leaves a k >= 1 only when it loses to plain even this many standard errors
    # above the window's estimate; 0 = at the point estimate (adaptive/step_policy.py)
    floor_confidence: float = Field(1.0, ge=0.0, le=10.0, allow_inf_nan=False)
    # adaspec's extension: at k = 0, speculation dearer than plain by more than this (relative) is
    # probed, and its evidence aged, proportionally less often (adaptive/step_controller.py)
    explore_overhead: float = Field(0.25, gt=0.0, allow_inf_nan=False)
    # adaspec's extension: a batch between two calibrated request buckets is priced by interpolating
    # their tables in the request count, not at the bucket above (adaptive/step_costs.py)
    interpolate_buckets: bool = True
    # adaspec's extension: exploration at k = 0 backs off (x2 per look that found nothing, up to this) while the
    # batch's requests stay the same; 1 = never back off (adaptive/step_controller.py)
    max_explore_backoff: int = Field(8, ge=1, le=1024)
    # adaspec's extension (adaptive/step_policy.py says why): with nothing waiting, k is scored by when the batch's
    # remaining work ends, each request at its own acceptance (adaptive/closed_step.py); false = R-C1's per-round score
    closed_batch: bool = True
    # adaspec's extension: the batch's acceptance is the mean of its own requests' (each shrunk towards the window's
    # pooled rate), re-scored when its requests change; false = the window's pooled counts (adaptive/batch_acceptance.py)
    per_request: bool = True
    # adaspec's extension: a request stops drafting (and verifying) after the first step whose path probability falls
    # below this; 0 = off (adaptive/step_policy.py)
    confidence_stop: float = Field(0.6, ge=0.0, lt=1.0, allow_inf_nan=False)
    # adaspec's extension: k = 1 priced from served round times next to plain ones, with a plain batch now and then
    # while k = 1 is marginal; false = the cost table alone (adaptive/step_served.py)
    served_costs: bool = True
    # adaspec's extension: with the confidence stop, a ceiling k >= 2 is priced at the depth its drafts reach; false =
    # at full depth (adaptive/step_depth.py)
    ceiling_pricing: bool = False
    # adaspec's extension: with the confidence stop, a batch of one greedy request that speculates drafts up to k_max
    # and the stop decides how deep; false = the controller's k is the ceiling (adaptive/step_policy.py)
    greedy_ceiling: bool = True
    # adaspec's extension: a request's own acceptance is shrunk towards the rates of the latest drafts, at least this
    # many, of every request (the population), not the window's pooled rates; 0 = the window's
    # (adaptive/batch_acceptance.py)
    population_drafts: int = Field(512, ge=0)
    # adaspec's extension: a request count without its own served price is priced at the nearest priced count's
    # correction of the table in its request bucket; false = the table alone until its own is known
    # (adaptive/step_served.py)
    served_transfer: bool = True


class DraftStepCalibration(_CalibrationFields):
    """Calibration part of `--adaptive_draft_step_config`: the verify fields minus draft_width and
    target_graph_rows (every step count k = 1..k_max is measured, R-C3)."""


class DraftStepConfig(BaseModel):
    """`--adaptive_draft_step_config` (R-C5). `version` must be 1; policy and calibration are optional."""

    model_config = _STRICT
    version: Literal[1] = 1
    policy: DraftStepPolicy = Field(default_factory=DraftStepPolicy)
    calibration: DraftStepCalibration = Field(default_factory=DraftStepCalibration)

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data):
        return _reject_old_switches(data)


def find_old_switch(data: Any, path: str = "") -> tuple[str, str] | None:
    """(old name, JSON path) of the first renamed switch used as a key or value anywhere in `data`."""
    if isinstance(data, dict):
        for k, v in data.items():
            p = f"{path}.{k}" if path else str(k)
            if k in OLD_SWITCHES:
                return k, p
            hit = find_old_switch(v, p)
            if hit:
                return hit
    elif isinstance(data, list):
        for i, v in enumerate(data):
            hit = find_old_switch(v, f"{path}[{i}]")
            if hit:
                return hit
    elif isinstance(data, str) and data in OLD_SWITCHES:
        return data, path or "(root)"
    return None


def _old_switch_message(name: str, path: str) -> tuple[str, str]:
    """(problem, fix) for a renamed switch found at `path`."""
    return (f"'{name}' was renamed to '{NEW_SWITCH}' and the old name is not an alias (R-D6)",
            f"remove '{name}' from this file and use the switch --{NEW_SWITCH}=true instead "
            "(it is a switch, not a calibration field)")

