"""Per-request sampling parameters (R-I1) and the refusal of unsupported features (R-B5).

`SamplingParams` validates ranges at construction (the error names the field and the allowed
range). Some fields are accepted by the schema *only* so that `unsupported_reason` can refuse
them with a clear message before execution, instead of failing on an unknown field or, worse,
silently ignoring them. Unknown fields are errors (`extra="forbid"`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # --- supported (R-I1) ---
    temperature: float = 1.0  # >= 0; 0 = greedy
    top_k: int = 0  # 0 or -1 = disabled, else >= 1
    top_p: float = 1.0  # in (0, 1]
    min_p: float = 0.0  # in [0, 1]
    max_tokens: int = 16  # >= 1
    stop: list[str] = []
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    seed: int | None = None  # supported without speculation only

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

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, v: Any) -> Any:
        if v is None:
            return []
        return [v] if isinstance(v, str) else v

    @field_validator("stop_token_ids", mode="before")
    @classmethod
    def _stop_token_ids(cls, v: Any) -> Any:
        return [] if v is None else v

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
        if speculative and self.seed is not None:
            return (
                "seed is not supported with speculative decoding (--speculative_algorithm); "
                "remove it or serve without speculation"
            )
        return None


def _is_plain_text_format(fmt: Any) -> bool:
    """OpenAI's `response_format={"type": "text"}` is the neutral default, not structured output."""
    kind = fmt.get("type") if isinstance(fmt, dict) else getattr(fmt, "type", None)
    return kind == "text"
