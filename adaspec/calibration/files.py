"""Reading calibration JSON files and turning pydantic's errors into one message per file (R-F3, R-C5, R-D6).

Every error is a `CalibrationConfigError` whose message names the source (flag and file), the
field as a JSON path (`contexts[1].max_kv_length`), the problem and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, get_args, get_origin

from pydantic import BaseModel, ValidationError

from .schema import (DRAFT_STEP_FLAG, VERIFY_FLAG, CalibrationConfigError, DraftStepConfig, VerifyCalibrationConfig,
                     _old_switch_message, find_old_switch)


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
    p = Path(path).expanduser()
    if not p.is_file():
        what = "is a directory, not a file" if p.is_dir() else "does not exist"
        raise CalibrationConfigError("(file)", f"{str(p)!r} {what}",
                                     f"pass an existing JSON file to {flag} or drop the flag to use built-in defaults",
                                     source)
    try:
        text = p.read_text(encoding="utf-8-sig")  # a BOM (Windows editors) is allowed, as for every input file
    except UnicodeDecodeError as e:
        raise CalibrationConfigError("(file)", f"not UTF-8 text (byte offset {e.start})", f"save {p} as UTF-8 JSON",
                                     source) from None
    except OSError as e:
        raise CalibrationConfigError("(file)", f"cannot be read ({e.strerror})", f"check the permissions of {p}",
                                     source) from None
    from ..strict_json import DuplicateKeyError, loads

    try:
        return loads(text), source
    except json.JSONDecodeError as e:
        raise CalibrationConfigError("(file)", f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}",
                                     f"fix the JSON syntax of {p}", source) from None
    except DuplicateKeyError as e:
        raise CalibrationConfigError("(file)", str(e).split(";")[0], "keep one of them", source) from None


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
