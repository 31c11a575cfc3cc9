"""Request checks shared by the engine's admission, the CLI (before the weights load) and the server.

A prompt is text (`str`) or token ids (a list/tuple of ints, documented as such): bytes, floats,
bools, None and nested lists are refused, never converted. The ids must fit the context limit
and the vocabulary; when the chat template is what makes a prompt too long, the message says so.
Every refusal is a `RequestError` whose `param` is the request field (`prompt`, `stop_token_ids`).
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

from ..errors import RequestError
from ..sampling_params import SamplingParams


def check_text(text: str, what: str = "prompt", param: str = "prompt") -> None:
    """Text must be valid Unicode that UTF-8 can encode: a lone surrogate (JSON's "\\ud800", or a
    str built from broken bytes) cannot be tokenised and would fail deep inside the tokenizer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        cp = ord(text[e.start])
        if 0xDC80 <= cp <= 0xDCFF:  # a byte that was not UTF-8 (command-line arguments keep them this way)
            raise RequestError(f"{what}: byte 0x{cp - 0xDC00:02X} at character {e.start} is not UTF-8 text; pass UTF-8 "
                               "text", param=param) from None
        raise RequestError(f"{what}: character {e.start} is a lone surrogate (U+{cp:04X}), which is not "
                           "valid Unicode text; send UTF-8 text (pair the surrogates or remove it)", param=param) from None


def check_params(params: Any) -> SamplingParams:
    if params is None:
        return SamplingParams()
    if not isinstance(params, SamplingParams):
        hint = " (build one with SamplingParams(**your_dict))" if isinstance(params, dict) else ""
        raise RequestError(f"params must be a SamplingParams, got {type(params).__name__}{hint}", param="params")
    return params


def is_token_ids(prompt: Any) -> bool:
    """A flat list/tuple of integers (numpy integers too; bools are not token ids)."""
    return (isinstance(prompt, (list, tuple)) and len(prompt) > 0
            and all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in prompt))


def token_ids(prompt: Any, what: str = "prompt") -> list[int]:
    """The ids of a token-id prompt, refusing anything that is not a flat sequence of ints."""
    if not isinstance(prompt, (list, tuple)):
        raise RequestError(f"{what}: expected text (str) or token ids (a list of int), got {type(prompt).__name__}"
                           + ("; decode bytes to str first" if isinstance(prompt, (bytes, bytearray)) else ""),
                           param="prompt")
    bad = next((t for t in prompt if isinstance(t, bool) or not isinstance(t, numbers.Integral)), None)
    if bad is not None:
        raise RequestError(f"{what}: token ids must be integers, got {type(bad).__name__} {bad!r}; pass text as a str "
                           "or token ids as a list of int", param="prompt")
    return [int(t) for t in prompt]


def check_prompt(ids: Sequence[int], max_model_len: int, vocab_size: int, *, template_tokens: int | None = None,
                 what: str = "prompt") -> None:
    """The ids are not empty, leave room for at least one new token and are inside the vocabulary.

    `template_tokens`: how many tokens the prompt had before the chat template wrapped it."""
    if not ids:
        raise RequestError(f"{what}: empty prompt; send at least one token of text", param="prompt")
    if len(ids) >= max_model_len:
        if template_tokens is not None and template_tokens < max_model_len:
            raise RequestError(
                f"{what}: the chat template turns the {template_tokens}-token prompt into {len(ids)} tokens, which do "
                f"not fit the context limit {max_model_len} (--max_model_len): raise --max_model_len or send it "
                "without the chat template (--chat=false)", param="prompt")
        raise RequestError(f"{what}: {len(ids)} tokens do not fit the context limit {max_model_len} (--max_model_len); "
                           f"shorten the prompt to at most {max_model_len - 1} tokens or raise --max_model_len",
                           param="prompt")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise RequestError(f"{what}: token ids {bad[:5]} are outside the vocabulary (size {vocab_size})", param="prompt")


def check_stop_ids(params: SamplingParams, vocab_size: int) -> None:
    bad = [t for t in params.stop_token_ids if t >= vocab_size]
    if bad:
        raise RequestError(f"stop_token_ids {bad[:5]} are outside the vocabulary (size {vocab_size}) and could "
                           "never match; remove them", param="stop_token_ids")


def normalise_prompts(prompts: Any) -> list:
    """`LLM.generate`'s prompts as a list: one str, one list of token ids, or a list of either."""
    if isinstance(prompts, str) or is_token_ids(prompts):
        return [prompts]
    if not isinstance(prompts, (list, tuple)):
        raise RequestError(f"prompts: expected a str, a list of token ids, or a list of those, got "
                           f"{type(prompts).__name__}" + ("; decode bytes to str first"
                                                          if isinstance(prompts, (bytes, bytearray)) else ""),
                           param="prompt")
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            token_ids(p, f"prompts[{i}]")
    return list(prompts)
