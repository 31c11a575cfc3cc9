"""Per-request sampling parameters (R-I1) and the refusal of unsupported features (R-B5).

``SamplingParams` validates types and ranges at construction (the error names the field and the
allowed range; `true`/`false` and strings are not numbers, NaN and infinity are refused).
`params_error` turns pydantic's ValidationError into one `RequestError` line naming the field. Some fields are accepted by the schema *only* so that `unsupported_reason` can refuse
them with a clear message before execution, instead of failing on an unknown field or, worse,
silently ignoring them. Unknown fields are errors (`extra="forbid"`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .errors import RequestError

MAX_SEED = 2**64 - 1  # as --seed (config.MAX_SEED): torch.Generator.manual_seed's range
MAX_TOP_K = 2**31 - 1  # larger values mean "off" anyway; the sampler keeps top_k in int64 tensors
_INT_FIELDS = ("top_k", "max_tokens", "seed", "min_tokens", "logprobs")
_FLOAT_FIELDS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")


class SamplingParamsError(RequestError):
    """A SamplingParams field is wrong: one line naming the field (`param`); the pydantic error is
    kept as `validation_error` so a caller can name the field its own way (`--max_tokens`)."""

    def __init__(self, message: str, *, param: str | None = None, validation_error: ValidationError | None = None):
        super().__init__(message, param=param)
        self.validation_error = validation_error


def non_token_id(v: Any) -> Any:
    """The first item of a list `v` that is no token id as given (a bool, float, str or bytes, which pydantic's lax mode
    would read as an integer: `true` and `1.0` as 1), else None (also for a `v` that is not a list). The server's
    request models check their token-id lists with it before pydantic converts them (server/protocol.py)."""
    return next((t for t in v if isinstance(t, (bool, float, str, bytes))), None) if isinstance(v, list) else None


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def __init__(self, **data: Any):
        """Raises SamplingParamsError (a RequestError, so a UserError) instead of pydantic's
        multi-line ValidationError (issue 8: one line naming the field)."""
        try:
            super().__init__(**data)
        except ValidationError as e:
            err = params_error(e)
            raise SamplingParamsError(str(err), param=err.param, validation_error=e) from None

    def __setattr__(self, name: str, value: Any) -> None:
        """`params.temperature = -5` is checked as the constructor checks it (it was accepted silently)."""
        try:
            super().__setattr__(name, value)
        except ValidationError as e:
            err = params_error(e)
            raise SamplingParamsError(str(err), param=err.param, validation_error=e) from None

    # --- supported (R-I1) ---
    temperature: float = 1.0  # >= 0; 0 = greedy
    top_k: int = 0  # 0 or -1 = disabled, else >= 1
    top_p: float = 1.0  # in (0, 1]
    min_p: float = 0.0  # in [0, 1]
    max_tokens: int = 16  # >= 1
    stop: list[str] = []
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    seed: int | None = None  # reproducible per request, with or without speculation (see round_runner)

    # --- accepted only to be refused by unsupported_reason (R-B5) ---
    logprobs: int | None = None
    min_tokens: int = 0
    logit_bias: dict[int, float] | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    guided_json: Any | None = None
    guided_regex: Any | None = None
    guided_grammar: Any | None = None
    response_format: Any | None = None

    # ---------------------------------------------------------------- validation
    @field_validator(*_INT_FIELDS, *_FLOAT_FIELDS, mode="before")
    @classmethod
    def _numbers_only(cls, v: Any, info) -> Any:
        """`true`, `"0.5"` and NaN/inf are not numbers here (pydantic's lax mode would convert them)."""
        if isinstance(v, (bool, str, bytes)) or (isinstance(v, float) and info.field_name in _INT_FIELDS):
            kind = "an integer" if info.field_name in _INT_FIELDS else "a number"
            raise ValueError(f"{info.field_name} must be {kind}, got {v!r}")
        if isinstance(v, float) and v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"{info.field_name} must be a finite number, got {v}")
        return v

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float) -> float:
        if not v >= 0.0 or v == float("inf"):  # also rejects NaN
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {v}")
        return v

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, v: int) -> int:
        if v < -1:
            raise ValueError(f"top_k must be 0 or -1 (disabled) or >= 1, got {v}")
        if v > MAX_TOP_K:
            raise ValueError(f"top_k must be at most {MAX_TOP_K} (0 disables it), got {v}")
        return v

    @field_validator("top_p")
    @classmethod
    def _top_p(cls, v: float) -> float:
        if not 0.0 < v <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {v}")
        return v

    @field_validator("min_p")
    @classmethod
    def _min_p(cls, v: float) -> float:
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {v}")
        return v

    @field_validator("max_tokens")
    @classmethod
    def _max_tokens(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"max_tokens must be >= 1, got {v}")
        return v

    @field_validator("ignore_eos", mode="before")
    @classmethod
    def _strict_bool(cls, v: Any, info) -> Any:
        if not isinstance(v, bool):  # "yes" or 1 would be converted by pydantic's lax mode
            raise ValueError(f"{info.field_name} must be true or false, got {v!r}")
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: int | None) -> int | None:
        if v is not None and not 0 <= v <= MAX_SEED:  # seeds are 64-bit: others would alias (2**64 + 1 == 1)
            raise ValueError(f"seed must be between 0 and 2**64-1, got {v}")
        return v

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, v: Any) -> Any:
        if v is None:
            return []
        return [v] if isinstance(v, str) else v

    @field_validator("stop")
    @classmethod
    def _stop_nonempty(cls, v: list[str]) -> list[str]:
        if any(s == "" for s in v):
            raise ValueError("stop strings must not be empty (an empty string would end every output at once); "
                             "remove the empty one")
        for s in v:
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"stop strings must be valid Unicode text; {s!r} holds a lone surrogate") from None
        return v

    @field_validator("stop_token_ids", mode="before")
    @classmethod
    def _stop_token_ids(cls, v: Any) -> Any:
        if non_token_id(v) is not None:  # 1.0 was read as 1
            raise ValueError(f"stop_token_ids must be token ids (integers), got {v!r}")
        return [] if v is None else v

    @field_validator("stop_token_ids")
    @classmethod
    def _stop_token_ids_range(cls, v: list[int]) -> list[int]:
        bad = [t for t in v if t < 0]
        if bad:
            raise ValueError(f"stop_token_ids must be >= 0, got {bad}")
        return v

    @field_validator("logprobs", mode="before")
    @classmethod
    def _logprobs(cls, v: Any) -> Any:
        # Chat clients send `logprobs: false` to mean "not requested".
        return None if v is False else v

    @field_validator("min_tokens")
    @classmethod
    def _min_tokens(cls, v: int) -> int:
        if v < 0:
            raise ValueError(f"min_tokens must be >= 0, got {v}")
        return v

    @field_validator("repetition_penalty")
    @classmethod
    def _repetition_penalty(cls, v: float) -> float:
        if not v > 0.0:
            raise ValueError(f"repetition_penalty must be > 0, got {v}")
        return v

    # ---------------------------------------------------------------- queries
    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    def unsupported_reason(self, *, speculative: bool) -> str | None:
        """Why this request cannot be served (R-B5), or None if it can.

        Returns the first problem found, as a sentence naming the field and what to change.
        """
        refuse = "is not supported by adaspec; remove it from the request"
        if self.logprobs is not None:
            return f"logprobs {refuse}"
        if self.min_tokens > 0:
            return f"min_tokens {refuse} (or set it to 0)"
        if self.logit_bias:
            return f"logit_bias {refuse}"
        if self.presence_penalty != 0.0:
            return f"presence_penalty {refuse} (or set it to 0)"
        if self.frequency_penalty != 0.0:
            return f"frequency_penalty {refuse} (or set it to 0)"
        if self.repetition_penalty != 1.0:
            return f"repetition_penalty {refuse} (or set it to 1.0)"
        for name in ("guided_json", "guided_regex", "guided_grammar"):
            if getattr(self, name) is not None:
                return f"{name} (structured output) {refuse}"
        if self.response_format is not None and not _is_plain_text_format(self.response_format):
            return f"response_format (structured output) {refuse} (or use {{'type': 'text'}})"
        # `seed` is supported everywhere: a seeded request's noise at each absolute position comes
        # from (seed, position), so speculation reproduces the plain output exactly (R-B5 needs no
        # refusal here); `speculative` stays in the signature for the server's callers.
        return None


def params_error(e: ValidationError, names: dict[str, str] | None = None) -> RequestError:
    """One line for the first problem of a SamplingParams ValidationError, without pydantic's
    "Value error," prefix. `names` maps a field to how the caller calls it (a CLI flag); `param` is
    the field (or that name)."""
    err = e.errors()[0]
    field = str(err["loc"][0]) if err.get("loc") else "params"
    shown = (names or {}).get(field, field)
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if err.get("type") in ("extra_forbidden", "no_such_attribute"):
        msg = f"{field} is not a sampling parameter"
    elif field not in msg:
        got = err.get("input")
        msg = f"{field}: {msg}" + (f" (got {got!r})" if not isinstance(got, (dict, list)) else "")
    if shown != field:  # "--max_tokens: must be >= 1, got 0"
        msg = f"{shown}: {msg.removeprefix(field + ' ').removeprefix(field + ': ')}"
    return RequestError(msg, param=shown)


def _is_plain_text_format(fmt: Any) -> bool:
    """OpenAI's `response_format={"type": "text"}` is the neutral default, not structured output."""
    kind = fmt.get("type") if isinstance(fmt, dict) else getattr(fmt, "type", None)
    return kind == "text"
