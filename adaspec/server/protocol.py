"""OpenAI request bodies of `/v1/completions` and `/v1/chat/completions` (R-I1, R-B5).

Every field an OpenAI (or vLLM-style) client may send is declared, so that the OpenAPI schema is
complete and an unsupported one is refused with a 400 that names it, before execution, instead of
being silently ignored (`unsupported`). Unknown fields are refused too (`extra="forbid"`). Ranges
of the sampling fields are checked by `SamplingParams` (one set of rules for every entry point).
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import RequestError
from ..sampling_params import SamplingParams, non_token_id

StopField = Union[str, list[str], None]


INT_FIELDS = ("max_tokens", "top_k", "n", "seed", "min_tokens")
FLOAT_FIELDS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
BOOL_FIELDS = ("stream", "ignore_eos")


def _strict_int(v: Any, info) -> Any:
    """JSON `true`, `"5"` and `2.0` are not integers here (pydantic's lax mode would convert them)."""
    if v is not None and (isinstance(v, (bool, str)) or isinstance(v, float)):
        raise ValueError(f"{info.field_name} must be an integer, got {v!r}")
    return v


def _strict_float(v: Any, info) -> Any:
    if v is not None and isinstance(v, (bool, str)):
        raise ValueError(f"{info.field_name} must be a number, got {v!r}")
    return v


def _strict_int_list(v: Any, info) -> Any:
    """`[true]` and `[1.0]` are not token ids (pydantic's lax mode would read them as 1)."""
    bad = non_token_id(v)
    if bad is not None:
        raise ValueError(f"{info.field_name} must be a list of token ids (integers), got {bad!r}")
    return v


def _strict_bool(v: Any, info) -> Any:
    if v is not None and not isinstance(v, bool):
        raise ValueError(f"{info.field_name} must be true or false, got {v!r}")
    return v


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    continuous_usage_stats: bool = Field(False, description="not supported (refused when true)")

    _bools = field_validator("include_usage", "continuous_usage_stats", mode="before")(_strict_bool)

    @field_validator("continuous_usage_stats")
    @classmethod
    def _no_continuous(cls, v: bool) -> bool:
        if v:
            raise ValueError("continuous_usage_stats is not supported by adaspec (usage comes in the last chunk "
                             "with include_usage); remove it")
        return v


class _Common(BaseModel):
    """Fields both endpoints share."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="served model name (see /v1/models); default: the served model")
    max_tokens: int | None = Field(None, description="maximum new tokens")
    temperature: float | None = Field(None, description="0 = greedy; default 1")
    top_p: float | None = None
    top_k: int | None = Field(None, description="0 or -1 = off")
    min_p: float | None = None
    n: int | None = Field(None, description="only 1 is supported")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: StopField = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool | None = False
    seed: int | None = Field(None, description="per-request seed of the sampling noise")
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    repetition_penalty: float | None = 1.0
    logit_bias: dict[str, float] | None = None
    min_tokens: int | None = 0
    response_format: dict[str, Any] | None = None
    guided_json: Any | None = None
    guided_regex: str | None = None
    guided_grammar: str | None = None
    user: str | None = None

    _ints = field_validator(*INT_FIELDS, mode="before")(_strict_int)
    _floats = field_validator(*FLOAT_FIELDS, mode="before")(_strict_float)
    _bools = field_validator(*BOOL_FIELDS, mode="before")(_strict_bool)
    _int_lists = field_validator("stop_token_ids", mode="before")(_strict_int_list)

    def sampling_params(self, default_max_tokens: int) -> SamplingParams:
        """SamplingParams for the engine; range errors surface as pydantic ValidationError."""
        fields = dict(
            max_tokens=self.max_tokens if self.max_tokens is not None else default_max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=0 if self.top_k is None else self.top_k,
            min_p=0.0 if self.min_p is None else self.min_p,
            stop=self.stop, stop_token_ids=self.stop_token_ids, ignore_eos=bool(self.ignore_eos), seed=self.seed,
            presence_penalty=self.presence_penalty or 0.0, frequency_penalty=self.frequency_penalty or 0.0,
            repetition_penalty=1.0 if self.repetition_penalty is None else self.repetition_penalty,
            min_tokens=self.min_tokens or 0, response_format=self.response_format, guided_json=self.guided_json,
            guided_regex=self.guided_regex, guided_grammar=self.guided_grammar,
            logit_bias={int(k): v for k, v in self.logit_bias.items()} if self.logit_bias else None,
        )
        return SamplingParams(**fields)

    def unsupported(self) -> None:
        """Refuse API features adaspec does not implement (R-B5); RequestError names the field."""
        if self.n is not None and self.n != 1:
            raise RequestError(f"n={self.n}: only n=1 is supported; send n=1 (or several requests)", param="n")
        if self.stream_options is not None and not self.stream:
            raise RequestError("stream_options is only allowed with stream=true", param="stream_options")
        if self.logit_bias:
            for key in self.logit_bias:
                if not key.lstrip("-").isdigit():
                    raise RequestError(f"logit_bias: key {key!r} is not a token id", param="logit_bias")


class CompletionRequest(_Common):
    prompt: Union[str, list[str], list[int], list[list[int]]] = Field(
        ..., description="one prompt: text or token ids (a list of several prompts is refused)")
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = None
    logprobs: int | None = None

    _c_ints = field_validator("best_of", "logprobs", mode="before")(_strict_int)
    _c_bools = field_validator("echo", mode="before")(_strict_bool)

    @field_validator("prompt", mode="before")
    @classmethod
    def _no_bool_ids(cls, v: Any) -> Any:
        """`[true, 5]` is not a list of token ids (pydantic would read true as 1)."""
        items = v if isinstance(v, list) else []
        flat = [t for x in items for t in (x if isinstance(x, list) else [x])]
        bad = next((t for t in flat if isinstance(t, (bool, float))), None)
        if bad is not None:
            raise ValueError(f"prompt: token ids must be integers, got {bad!r}; send text or a list of int")
        if any(isinstance(t, int) for t in flat) and any(not isinstance(t, int) for t in flat):
            raise ValueError("prompt: a list mixes token ids and other values; send text or a list of int")
        return v

    def unsupported(self) -> None:
        super().unsupported()
        if self.echo:
            raise RequestError("echo=true is not supported by adaspec; remove it", param="echo")
        if self.suffix:
            raise RequestError("suffix (insertion) is not supported by adaspec; remove it", param="suffix")
        if self.best_of is not None and self.best_of != 1:
            raise RequestError(f"best_of={self.best_of}: only 1 is supported; remove it", param="best_of")
        if self.logprobs is not None:
            raise RequestError("logprobs is not supported by adaspec; remove it from the request", param="logprobs")

    def single_prompt(self) -> str | list[int]:
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):
            if len(p) != 1:
                raise RequestError(f"prompt: a list of {len(p)} prompts is not supported; send one prompt per "
                                   "request", param="prompt")
            p = p[0]
        if isinstance(p, str) and not p:
            raise RequestError("prompt: empty prompt; send at least one character", param="prompt")
        if isinstance(p, list) and not p:
            raise RequestError("prompt: empty token list; send at least one token", param="prompt")
        return p


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant", "developer"]
    content: Union[str, list[dict[str, Any]], None] = None
    name: str | None = None

    def text(self, i: int) -> str:
        from ..preflight.requests import check_text

        if self.name is not None:
            raise RequestError(f"messages[{i}].name is not supported by adaspec (the chat template has no place for "
                               "names); remove it", param=f"messages[{i}].name")
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            check_text(self.content, f"messages[{i}].content", f"messages[{i}].content")
            return self.content
        parts = []
        for j, part in enumerate(self.content):
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"messages[{i}].content[{j}]: only text parts ({{'type': 'text', 'text': ...}}) "
                                   "are supported", param=f"messages[{i}].content")
            check_text(part["text"], f"messages[{i}].content[{j}].text", f"messages[{i}].content")
            parts.append(part["text"])
        return "".join(parts)


class ChatCompletionRequest(_Common):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(None, description="same as max_tokens (the newer OpenAI name)")
    logprobs: bool | None = False
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Union[str, dict[str, Any], None] = None
    parallel_tool_calls: bool | None = None
    add_generation_prompt: bool | None = True

    _ch_ints = field_validator("max_completion_tokens", "top_logprobs", mode="before")(_strict_int)
    _ch_bools = field_validator("logprobs", "add_generation_prompt", "parallel_tool_calls", mode="before")(_strict_bool)

    def unsupported(self) -> None:
        super().unsupported()
        if self.logprobs:
            raise RequestError("logprobs is not supported by adaspec; remove it or send logprobs=false",
                               param="logprobs")
        if self.top_logprobs is not None:
            raise RequestError("top_logprobs is not supported by adaspec; remove it", param="top_logprobs")
        if self.tools:
            raise RequestError("tools (function calling) are not supported by adaspec; remove them", param="tools")
        if self.tool_choice not in (None, "none"):
            raise RequestError("tool_choice is not supported by adaspec; remove it", param="tool_choice")
        if self.max_completion_tokens is not None and self.max_tokens is not None \
                and self.max_completion_tokens != self.max_tokens:
            raise RequestError("max_tokens and max_completion_tokens differ; send only one",
                               param="max_completion_tokens")
        if self.max_completion_tokens is not None and self.max_completion_tokens < 1:
            raise RequestError(f"max_completion_tokens must be >= 1, got {self.max_completion_tokens}",
                               param="max_completion_tokens")
        if self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens

    def conversation(self) -> list[dict[str, str]]:
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text(i)}
                for i, m in enumerate(self.messages)]
