"""Calibration configuration files, their defaults and their validation (R-F3, R-F4, R-F5, R-F7, R-C5, R-D6).

Two optional JSON files, both parsed by pydantic v2 schemas with `extra="forbid"` and strict types:

* `--adaptive_target_verify_calibration=FILE` -> `VerifyCalibrationConfig` (R-F3): every field
  optional; omitted fields take the defaults of R-F3 in `resolve_verify_calibration`.
* `--adaptive_draft_step_config=FILE` -> `DraftStepConfig` (R-C5): `{"version": 1, "policy": {...},
  "calibration": {...}}`; either part may be omitted. Every candidate step count k = 1..k_max is
  measured; precomputed step cost models cannot be loaded (R-C3).

A resolver combines a (possibly absent) file with `EngineFacts` -- what the engine prepared at
warm-up -- into an immutable `EffectiveCalibration`: every default filled in, every rule of R-F4/R-F5
checked before any sampling. `EffectiveCalibration.log_block()` renders the R-F7 start-up block.

Every error is a `CalibrationConfigError` (a `ValueError`) whose message names the source (flag and
file), the field as a JSON path (`contexts[1].max_kv_length`) and the fix.
"""

from __future__ import annotations

from ..errors import UserError

from ..geometry import unified_row_buckets

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .cost_models import describe_components, grid_components

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
        super().__init__(f"{prefix}{field}: {problem}. Fix: {fix}")


# ----------------------------------------------------------------------------- schemas

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


# ----------------------------------------------------------------------------- parsing files

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


def _json_path(loc: Iterable) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def _model_at(cls: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The schema class that owns the key at `loc` (the last element), for listing allowed keys."""
    cur: Any = cls
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(cur, type) and issubclass(cur, BaseModel)):
            continue
        f = cur.model_fields.get(part)
        if f is None:
            return None
        cur = _unwrap_model(f.annotation)
    return cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None


def _unwrap_model(tp) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in get_args(tp) if get_origin(tp) is not None else ():
        m = _unwrap_model(arg)
        if m is not None:
            return m
    return None


_SPECIAL_KEYS = {
    "step_cost_models": ("loading precomputed step cost models is not supported (R-C3, R-C5)",
                         "remove the key; every step count 1..k_max is measured at start-up"),
}
_DRAFT_STEP_ONLY_VERIFY = {
    "draft_width": "the width is --num_speculative_tokens (k_max) and every step count 1..k_max is measured",
    "target_graph_rows": "every step count k = 1..k_max is measured at the target rows it needs (R-C3)",
}


def _is_union_tag(part: Any) -> bool:
    """pydantic's union-member / key tags in an error location ("list[int]", "[key]"): not JSON keys."""
    return isinstance(part, str) and ("[" in part or "(" in part)


def _value_fix(err: dict, path: str) -> tuple[str, str]:
    """(problem, fix) for a value error reported by pydantic."""
    typ, msg, ctx = err["type"], err["msg"], err.get("ctx") or {}
    inp = err.get("input")
    got = "" if isinstance(inp, (dict, list)) else f" (got {json.dumps(inp) if _jsonable(inp) else repr(inp)})"
    if typ == "value_error":
        problem, _, fix = msg.removeprefix("Value error, ").partition("; fix: ")
        return problem + got, fix or f"correct {path}"
    if typ in ("int_type", "int_parsing", "int_from_float"):
        return msg + got, f"write {path} as a JSON integer (no quotes, not true/false)"
    if typ in ("float_type", "float_parsing", "finite_number"):
        return msg + got, f"write {path} as a finite JSON number"
    if typ in ("greater_than_equal", "greater_than", "less_than", "less_than_equal"):
        return msg + got, f"set {path} to a value that is {msg.removeprefix('Input should be ')}"
    if typ == "literal_error":
        return msg + got, f"set {path} to {ctx.get('expected', 'an allowed value')}"
    if typ == "too_short":
        return msg + got, f"give {path} at least one entry, or omit it to use the default"
    return msg + got, f"correct {path}"


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


def _translate(e: ValidationError, cls: type[BaseModel], source: str) -> CalibrationConfigError:
    errs = e.errors()
    # a union (list | dict) reports a type error for every member it did not match: keep the member
    # the input actually chose unless that is all there is
    tagged_type = [x for x in errs if x["type"] in ("list_type", "dict_type") and any(map(_is_union_tag, x["loc"]))]
    if len(tagged_type) < len(errs):
        errs = [x for x in errs if x not in tagged_type]
    problems: list[tuple[str, str]] = []
    fixes: list[str] = []
    for err in errs:
        loc = tuple(x for x in err["loc"] if not _is_union_tag(x))
        path = _json_path(loc)
        key = loc[-1] if loc else None
        if "[key]" in err["loc"]:  # a dict key of the wrong type (target_graph_rows keys are request buckets)
            path = _json_path(loc[:-1])
            problem = f"key {json.dumps(key) if _jsonable(key) else repr(key)} is not a request bucket (an integer)"
            fix = f'use request buckets as the keys of {path}, e.g. {{"8": [8, 16, 48]}}'
        elif err["type"] in ("list_type", "dict_type") and any(map(_is_union_tag, err["loc"])):
            problem = f"expected a list of G values or an object of lists per request bucket (got {err.get('input')!r})"
            fix = f'write {path} as [G, ...] or {{"Bcap": [G, ...]}}'
        elif err["type"] == "extra_forbidden":
            owner = _model_at(cls, loc)
            allowed = sorted(owner.model_fields) if owner else []
            if key in _SPECIAL_KEYS:
                problem, fix = _SPECIAL_KEYS[key]
            elif cls is DraftStepConfig and key in _DRAFT_STEP_ONLY_VERIFY:
                problem, fix = f"not a draft-step calibration field ({_DRAFT_STEP_ONLY_VERIFY[key]})", f"remove {path}"
            else:
                problem = f"unknown key '{key}'"
                fix = f"remove {path} or fix its spelling (allowed keys there: {', '.join(allowed)})"
        elif err["type"] == "missing":
            problem, fix = "required key is missing", f"add {path}"
        else:
            problem, fix = _value_fix(err, path)
        problems.append((path, problem))
        fixes.append(fix)
    problems = list(dict.fromkeys(problems))
    field0, problem0 = problems[0] if problems else ("(root)", "invalid configuration")
    text = problem0 + "".join(f"; also {p}: {q}" for p, q in problems[1:])
    return CalibrationConfigError(field0, text, "; ".join(dict.fromkeys(fixes)), source)


def _read_json(path: str | Path, flag: str) -> tuple[Any, str]:
    source = f"{flag}={path}"
    p = Path(path)
    if not p.is_file():
        raise CalibrationConfigError("(file)", f"file {str(p)!r} does not exist or is not a file",
                                     f"pass an existing JSON file to {flag} or drop the flag to use built-in defaults",
                                     source)
    text = p.read_text(encoding="utf-8")
    try:
        return json.loads(text), source
    except json.JSONDecodeError as e:
        raise CalibrationConfigError("(file)", f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}",
                                     f"fix the JSON syntax of {p}", source) from None


def _parse(cls: type[BaseModel], data: Any, source: str):
    hit = find_old_switch(data)
    if hit is not None:
        problem, fix = _old_switch_message(*hit)
        raise CalibrationConfigError(hit[1], problem, fix, source)
    if not isinstance(data, dict):
        raise CalibrationConfigError("(root)", f"expected a JSON object, got {type(data).__name__}",
                                     "write the configuration as a JSON object {...}", source)
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise _translate(e, cls, source) from None


def parse_verify_calibration(data: Any, source: str = VERIFY_FLAG) -> VerifyCalibrationConfig:
    return _parse(VerifyCalibrationConfig, data, source)


def parse_draft_step_config(data: Any, source: str = DRAFT_STEP_FLAG) -> DraftStepConfig:
    return _parse(DraftStepConfig, data, source)


def load_verify_calibration(path: str | Path) -> VerifyCalibrationConfig:
    data, source = _read_json(path, VERIFY_FLAG)
    return parse_verify_calibration(data, source)


def load_draft_step_config(path: str | Path) -> DraftStepConfig:
    data, source = _read_json(path, DRAFT_STEP_FLAG)
    return parse_draft_step_config(data, source)


# ----------------------------------------------------------------------------- engine facts

@dataclass(frozen=True)
class EngineFacts:
    """What the engine prepared at warm-up and the limits calibration must respect (filled by the engine).

    `target_rows[bcap]` lists the legal prepared target-row buckets G of that request bucket, the
    full-width bucket being the largest (split: Bcap..Bcap*(w+1); unified: the R-F6 bindings).
    `request_buckets` are per DP shard (R-H1)."""

    num_speculative_tokens: int  # w (adaptive verify) or k_max (adaptive draft step)
    request_buckets: tuple[int, ...]  # prepared request buckets (per DP shard)
    model_context_limit: int  # --max_model_len: prompt + output tokens per request
    kv_capacity_per_slot: int  # KV cache tokens one request slot can hold
    target_rows: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # needed for adaptive verify
    dp_size: int = 1
    unified: bool = False

    def __post_init__(self):
        object.__setattr__(self, "request_buckets", tuple(sorted(set(int(b) for b in self.request_buckets))))
        object.__setattr__(self, "target_rows",
                           {int(b): tuple(sorted(set(int(g) for g in gs))) for b, gs in dict(self.target_rows).items()})
        if self.num_speculative_tokens < 1 or not self.request_buckets:
            raise ValueError("EngineFacts needs num_speculative_tokens >= 1 and at least one request bucket")

    @classmethod
    def from_geometry(cls, geometry, *, model_context_limit: int, kv_capacity_per_slot: int,
                      dp_size: int = 1, num_speculative_tokens: int | None = None) -> "EngineFacts":
        """From an object with `request_buckets`, `target_rows`, `width`, `unified` (adaspec.geometry.PreparedGeometry)."""
        return cls(num_speculative_tokens or geometry.width, tuple(geometry.request_buckets), model_context_limit,
                   kv_capacity_per_slot, dict(geometry.target_rows), dp_size, bool(geometry.unified))

    def full_width_rows(self, bcap: int) -> int | None:
        rows = self.target_rows.get(bcap)
        return max(rows) if rows else None

    def geometry_lines(self, grid: Mapping[int, Iterable[int]] | None = None, x_name: str = "G") -> list[str]:
        layout = "unified" if self.unified else "split"
        lines = [f"prepared geometry: layout {layout}, dp_size {self.dp_size}, request buckets "
                 f"{list(self.request_buckets)} (per DP shard), context limit {self.model_context_limit}, "
                 f"KV capacity per slot {self.kv_capacity_per_slot}"]
        for b in self.request_buckets:
            rows = list(self.target_rows.get(b, ()))
            parts = [f"prepared G {rows}"] if rows else []
            if grid is not None:
                cal = grid.get(b)
                parts.append(f"calibrated {x_name} {list(cal)}" if cal else "not calibrated (runs at full width)")
            lines.append(f"  Bcap {b}: " + "; ".join(parts))
        return lines


def compact_json(d: Mapping) -> str:
    """A JSON object with one top-level key per line and compact values (for logs)."""
    if not d:
        return "{}"
    body = ",\n".join(f"  {json.dumps(str(k))}: {json.dumps(v, separators=(', ', ': '))}" for k, v in d.items())
    return "{\n" + body + "\n}"


def worst_case_progress_tokens(warmup_steps: int, window_steps: int, windows_per_point: int, width: int) -> int:
    """KV tokens one calibration request can gain at a point: every measured round accepting all
    `width` drafts plus the bonus token, and two further rounds in flight (R-F4)."""
    return (warmup_steps + windows_per_point * window_steps + IN_FLIGHT_ROUNDS) * (width + 1)


# ----------------------------------------------------------------------------- effective configuration

Mode = Literal["adaptive_target_verify", "adaptive_draft_step"]


def mode_axis(mode: str) -> str:
    """The second axis of a cost table: "g" (target rows, adaptive verify) or "k" (draft steps)."""
    return "g" if mode == "adaptive_target_verify" else "k"


@dataclass(frozen=True)
class EffectiveCalibration:
    """The calibration that will run, every default filled in and validated (R-F3..R-F5, R-C5)."""

    mode: str
    model: str
    draft_width: int  # w (verify) or k_max (draft step)
    request_buckets: tuple[int, ...]
    grid: Mapping[int, tuple[int, ...]]  # Bcap -> G values (verify) or step counts k (draft step)
    contexts: tuple[ContextRange, ...]
    warmup_steps: int
    window_steps: int
    windows_per_point: int
    token_seed: int
    facts: EngineFacts
    policy: DraftStepPolicy | None = None  # draft step only
    defaulted: tuple[str, ...] = ()  # fields that came from the built-in defaults

    @property
    def axis(self) -> str:
        """Name of the second table axis: "g" (target rows) or "k" (draft steps)."""
        return mode_axis(self.mode)

    @property
    def x_name(self) -> str:
        return "G" if self.axis == "g" else "k"

    @property
    def worst_case_progress(self) -> int:
        return worst_case_progress_tokens(self.warmup_steps, self.window_steps, self.windows_per_point,
                                          self.draft_width)

    @property
    def kv_ranges(self) -> tuple[tuple[int, int], ...]:
        return tuple((c.min_kv_length, c.max_kv_length) for c in self.contexts)

    def context_tuples(self) -> list[tuple[int, int, int]]:
        """(prefill_tokens, min_kv_length, max_kv_length) per context range."""
        return [(c.prefill_tokens, c.min_kv_length, c.max_kv_length) for c in self.contexts]

    def synthetic_requests(self, bcap: int) -> int:
        """Synthetic requests a point at request bucket `bcap` builds: buckets are per DP shard (R-H1)."""
        return bcap * self.facts.dp_size

    def points(self) -> list[tuple[int, int, int]]:
        """(context index, bcap, x) of every calibration point, in measuring order."""
        return [(i, b, x) for i in range(len(self.contexts)) for b in self.request_buckets for x in self.grid[b]]

    @property
    def num_points(self) -> int:
        return len(self.contexts) * sum(len(self.grid[b]) for b in self.request_buckets)

    @property
    def rounds_per_point(self) -> int:
        return self.warmup_steps + self.windows_per_point * self.window_steps

    def calibration_dict(self) -> dict:
        d: dict[str, Any] = {"model": self.model}
        if self.mode == "adaptive_target_verify":
            d["draft_width"] = self.draft_width
        d["request_buckets"] = list(self.request_buckets)
        if self.mode == "adaptive_target_verify":
            d["target_graph_rows"] = {str(b): list(self.grid[b]) for b in self.request_buckets}
        d["contexts"] = [c.model_dump() for c in self.contexts]
        d.update(warmup_steps=self.warmup_steps, window_steps=self.window_steps,
                 windows_per_point=self.windows_per_point, token_seed=self.token_seed)
        return d

    def to_config_dict(self) -> dict:
        """The effective configuration as JSON data; loading it back as a file reproduces this calibration."""
        if self.mode == "adaptive_target_verify":
            return self.calibration_dict()
        return {"version": 1, "policy": self.policy.model_dump() if self.policy else DraftStepPolicy().model_dump(),
                "calibration": self.calibration_dict()}

    def log_block(self, algorithm: str, source: str) -> str:
        """The R-F7 start-up block. `source`: "built-in", "file PATH" or "saved table PATH"."""
        lines = [f"{algorithm} adaptive effective configuration",
                 f"source: {source}",
                 f"mode: {self.mode} (cost model {self.model} over Bcap x {self.x_name})",
                 "effective configuration (every default filled in"
                 + (f"; from defaults: {', '.join(self.defaulted)}" if self.defaulted else "") + "):",
                 compact_json(self.to_config_dict())]
        lines += self.facts.geometry_lines(self.grid, self.x_name)
        if self.mode == "adaptive_draft_step":
            lines.append(f"every step count k = 0..{self.draft_width} is measured independently (R-C3; "
                         "k = 0 is a plain round that only refreshes the draft)")
        lines.append(f"calibration: {self.num_points} points x {self.rounds_per_point} rounds "
                     f"({self.warmup_steps} warm-up + {self.windows_per_point} windows x {self.window_steps}); "
                     f"Bcap x dp_size {self.facts.dp_size} synthetic requests per point; worst-case progress "
                     f"{self.worst_case_progress} KV tokens per point")
        lines.append(GREEDY_NOTE)
        lines.append(FALLBACK_NOTE)
        return "\n".join(lines)


def _fail(source: str, field: str, problem: str, fix: str):
    raise CalibrationConfigError(field, problem, fix, source)


def _resolve_buckets(requested: list[int] | None, facts: EngineFacts, source: str) -> tuple[tuple[int, ...], bool]:
    prepared = list(facts.request_buckets)
    if requested is None:
        buckets = [b for b in prepared if b <= DEFAULT_MAX_REQUEST_BUCKET] or prepared[:1]
        return tuple(buckets), True
    missing = sorted(b for b in requested if b not in prepared)
    if missing:
        _fail(source, "request_buckets",
              f"{missing} were not prepared at warm-up (prepared request buckets: {prepared}); nothing was sampled",
              "list only prepared buckets in request_buckets, or prepare more (--graph_decode_batch_sizes, "
              "--max_seqs_per_batch)")
    return tuple(sorted(requested)), False


def _resolve_rows(requested, buckets: tuple[int, ...], facts: EngineFacts, source: str) -> dict[int, tuple[int, ...]]:
    for b in buckets:
        if not facts.target_rows.get(b):
            raise ValueError(f"EngineFacts.target_rows has no prepared target rows for request bucket {b}")
    prepared = {b: facts.target_rows[b] for b in buckets}
    if requested is None:
        return dict(prepared)
    if isinstance(requested, list):
        nowhere = sorted(g for g in requested if not any(g in prepared[b] for b in buckets))
        if nowhere:
            _fail(source, "target_graph_rows",
                  f"{nowhere} were not prepared for any calibrated request bucket "
                  f"(prepared: {', '.join(f'Bcap {b}: {list(prepared[b])}' for b in buckets)}); nothing was sampled",
                  "list only prepared target rows")
        grid = {b: tuple(g for g in prepared[b] if g in requested) for b in buckets}
        where = lambda b: "target_graph_rows"  # noqa: E731
    else:
        extra = sorted(b for b in requested if b not in buckets)
        if extra:
            _fail(source, "target_graph_rows",
                  f"keys {extra} are not calibrated request buckets (request_buckets: {list(buckets)})",
                  "use request buckets from request_buckets as keys, or add them to request_buckets")
        grid = {}
        for b in buckets:
            if b not in requested:
                grid[b] = prepared[b]
                continue
            bad = sorted(g for g in requested[b] if g not in prepared[b])
            if bad:
                _fail(source, f"target_graph_rows.{b}",
                      f"{bad} were not prepared for request bucket {b} (prepared: {list(prepared[b])}); "
                      "nothing was sampled", f"list only prepared target rows for request bucket {b}")
            grid[b] = tuple(sorted(requested[b]))
        where = lambda b: f"target_graph_rows.{b}" if b in requested else "target_graph_rows"  # noqa: E731
    for b in buckets:
        full = max(prepared[b])
        if full not in grid[b]:
            _fail(source, where(b),
                  f"the full-width bucket G={full} of request bucket {b} is missing; full width must stay covered",
                  f"add {full} to {where(b)}")
    return grid


def _resolve_contexts(requested: list[ContextRange] | None, facts: EngineFacts, progress: int,
                      progress_text: str, source: str) -> tuple[tuple[ContextRange, ...], bool]:
    ctx_limit, kv_cap = facts.model_context_limit, facts.kv_capacity_per_slot
    limit = min(ctx_limit, kv_cap)
    limit_name = (f"the model context limit {ctx_limit} (--max_model_len)" if ctx_limit <= kv_cap
                  else f"the KV capacity per slot {kv_cap}")
    if requested is None:
        max_kv = min(DEFAULT_MAX_KV, limit)
        prefill = min(DEFAULT_PREFILL_TOKENS, max_kv - progress)
        if prefill < 1:
            _fail(source, "contexts",
                  f"the default context range does not fit: {limit_name} leaves {max_kv} KV tokens, but the "
                  f"worst-case calibration progress alone needs {progress} ({progress_text})",
                  "pass a smaller explicit config (fewer warmup_steps, window_steps or windows_per_point) "
                  "in the calibration file, or raise the context limit")
        return (ContextRange(prefill_tokens=prefill, min_kv_length=min(DEFAULT_MIN_KV, prefill),
                             max_kv_length=max_kv),), True
    for i, c in enumerate(requested):
        p = f"contexts[{i}]"
        if c.max_kv_length > ctx_limit:
            _fail(source, f"{p}.max_kv_length",
                  f"{c.max_kv_length} exceeds the model context limit {ctx_limit} (--max_model_len)",
                  f"lower {p}.max_kv_length to at most {ctx_limit}")
        if c.max_kv_length > kv_cap:
            _fail(source, f"{p}.max_kv_length", f"{c.max_kv_length} exceeds the KV capacity per slot {kv_cap}",
                  f"lower {p}.max_kv_length to at most {kv_cap}")
        if c.prefill_tokens < c.min_kv_length:
            _fail(source, f"{p}.prefill_tokens",
                  f"{c.prefill_tokens} is below min_kv_length {c.min_kv_length}: measurements would start "
                  "outside the claimed KV range",
                  f"raise {p}.prefill_tokens to at least {c.min_kv_length} or lower min_kv_length")
        if c.prefill_tokens + progress > c.max_kv_length:
            _fail(source, f"{p}.prefill_tokens",
                  f"prefill_tokens {c.prefill_tokens} + worst-case progress {progress} ({progress_text}) = "
                  f"{c.prefill_tokens + progress} exceeds max_kv_length {c.max_kv_length}",
                  f"lower {p}.prefill_tokens to at most {c.max_kv_length - progress}, raise max_kv_length, "
                  "or use fewer warmup_steps, window_steps or windows_per_point")
    order = sorted(range(len(requested)), key=lambda i: requested[i].min_kv_length)
    for i, j in zip(order, order[1:]):
        a, b = requested[i], requested[j]
        if b.min_kv_length <= a.max_kv_length:
            _fail(source, f"contexts[{j}]",
                  f"KV range [{b.min_kv_length}, {b.max_kv_length}] overlaps contexts[{i}] "
                  f"[{a.min_kv_length}, {a.max_kv_length}]",
                  "make the context ranges disjoint")
    return tuple(sorted(requested, key=lambda c: c.min_kv_length)), False


def _resolve_common(cfg: _CalibrationFields, facts: EngineFacts, width: int, source: str,
                    default_model: str = DEFAULT_MODEL) -> dict:
    defaulted = []

    def pick(name, default):
        v = getattr(cfg, name)
        if v is None:
            defaulted.append(name)
            return default
        return v

    model = pick("model", default_model)
    warmup = pick("warmup_steps", DEFAULT_WARMUP_STEPS)
    window = pick("window_steps", DEFAULT_WINDOW_STEPS)
    windows = pick("windows_per_point", DEFAULT_WINDOWS_PER_POINT)
    seed = pick("token_seed", DEFAULT_TOKEN_SEED)
    buckets, d = _resolve_buckets(cfg.request_buckets, facts, source)
    if d:
        defaulted.append("request_buckets")
    progress = worst_case_progress_tokens(warmup, window, windows, width)
    text = (f"({warmup} warm-up + {windows} x {window} measured + {IN_FLIGHT_ROUNDS} in-flight rounds) "
            f"x {width + 1} tokens")
    contexts, d = _resolve_contexts(cfg.contexts, facts, progress, text, source)
    if d:
        defaulted.append("contexts")
    return dict(model=model, request_buckets=buckets, contexts=contexts, warmup_steps=warmup, window_steps=window,
                windows_per_point=windows, token_seed=seed, defaulted=defaulted)


def _default_source(flag: str, source: str | None) -> str:
    return source if source else f"{flag} (built-in defaults)"


def resolve_verify_calibration(cfg: VerifyCalibrationConfig | None, facts: EngineFacts,
                               source: str | None = None) -> EffectiveCalibration:
    """Fill the R-F3 defaults and check R-F4/R-F5 before any sampling.

    `source` is used in error messages, e.g. "--adaptive_target_verify_calibration=/cfg.json"."""
    src = _default_source(VERIFY_FLAG, source)
    cfg = cfg if cfg is not None else VerifyCalibrationConfig()
    w = facts.num_speculative_tokens
    if cfg.draft_width is not None and cfg.draft_width != w:
        _fail(src, "draft_width",
              f"{cfg.draft_width} in the calibration file but --num_speculative_tokens={w}",
              f"remove draft_width (it is derived from --num_speculative_tokens) or set it to {w}")
    common = _resolve_common(cfg, facts, w, src)
    defaulted = common.pop("defaulted")
    if cfg.draft_width is None:
        defaulted.insert(1, "draft_width")
    if cfg.target_graph_rows is None:
        defaulted.append("target_graph_rows")
    grid = _resolve_rows(cfg.target_graph_rows, common["request_buckets"], facts, src)
    if common["model"] == "additive":
        comps = grid_components((b, g) for b, gs in grid.items() for g in gs)
        if len(comps) > 1:
            _fail(src, "target_graph_rows",
                  f"the additive model needs a grid connected through shared G values, but it splits into "
                  f"{describe_components(comps)}",
                  "add a G value shared between these request buckets (prepared for both) or use \"model\": \"sps\"")
    return EffectiveCalibration(mode="adaptive_target_verify", draft_width=w, grid=grid, facts=facts,
                                defaulted=tuple(defaulted), **common)


def resolve_draft_step_config(cfg: DraftStepConfig | None, facts: EngineFacts,
                              source: str | None = None) -> EffectiveCalibration:
    """Defaults of R-C5 (policy) and R-F3 (calibration); every k = 1..k_max is measured at every bucket."""
    src = _default_source(DRAFT_STEP_FLAG, source)
    cfg = cfg if cfg is not None else DraftStepConfig()
    k_max = facts.num_speculative_tokens
    # A k-step round verifies Bcap*(k+1) rows, so its cost depends on Bcap and k jointly, which
    # bias + alpha(Bcap) + theta(k) cannot represent (held-out error 14-39% measured on the bundled
    # model). The default is therefore one SPS curve per request bucket, i.e. every (Bcap, k)
    # measured independently is kept as measured (R-C3); "additive" stays available.
    common = _resolve_common(cfg.calibration, facts, k_max, src, default_model=DRAFT_STEP_DEFAULT_MODEL)
    defaulted = ["calibration." + n for n in common.pop("defaulted")]
    if "policy" not in cfg.model_fields_set:
        defaulted.insert(0, "policy")
    # k = 0 (a plain round that only refreshes the draft) is measured too, so the controller can
    # choose not to speculate when the table says speculation does not pay (issue 5)
    ks = tuple(range(0, k_max + 1))
    grid = {b: ks for b in common["request_buckets"]}
    return EffectiveCalibration(mode="adaptive_draft_step", draft_width=k_max, grid=grid, facts=facts,
                                policy=cfg.policy, defaulted=tuple(defaulted), **common)


unified_bindings = unified_row_buckets  # R-F6, defined once in adaspec/geometry.py


__all__ = [
    "CalibrationConfigError", "ContextRange", "VerifyCalibrationConfig", "DraftStepPolicy", "DraftStepCalibration",
    "DraftStepConfig", "EngineFacts", "EffectiveCalibration", "load_verify_calibration", "load_draft_step_config",
    "parse_verify_calibration", "parse_draft_step_config", "resolve_verify_calibration",
    "resolve_draft_step_config", "worst_case_progress_tokens", "unified_bindings", "find_old_switch",
    "VERIFY_FLAG", "DRAFT_STEP_FLAG", "GREEDY_NOTE", "FALLBACK_NOTE", "SOURCE_BUILTIN",
]
