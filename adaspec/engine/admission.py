"""The checks a request passes before the engine does any work for it (R-B5, R-E3; issue 8).

`check_request` is what `LLMEngine.make_request` runs: sampling parameters, features the engine's
configuration cannot serve, the prompt (text or token ids) and stop tokens. Every refusal is a
`RequestError` naming the field (`param`), which the server turns into an HTTP 400.
"""

from __future__ import annotations

from typing import Sequence

from ..config import EngineConfig
from ..errors import RequestError
from ..preflight.requests import check_params, check_prompt, check_stop_ids, check_text, token_ids
from ..sampling_params import SamplingParams


def check_request(config: EngineConfig, tokenizer, max_model_len: int, vocab_size: int, prompt: str | Sequence[int],
                  params: SamplingParams | None, prompt_text: str | None = None,
                  template_tokens: int | None = None) -> tuple[SamplingParams, str | None, list[int]]:
    """(params, prompt text, prompt ids) of an acceptable request; RequestError otherwise."""
    params = check_params(params)
    reason = params.unsupported_reason(speculative=config.speculative)
    if reason:
        raise RequestError(reason, param=reason.split()[0])
    if config.enable_unified_mtp_graph and params.temperature > 0:
        raise RequestError(
            f"temperature={params.temperature} is not supported with --enable_unified_mtp_graph=true, which "
            "serves temperature 0 only (R-E3); send temperature 0 or restart with --enable_unified_mtp_graph=false",
            param="temperature")
    if isinstance(prompt, str):
        if prompt == "":
            raise RequestError("prompt: empty prompt; send some text", param="prompt")
        check_text(prompt)
        text, ids = prompt, tokenizer.encode(prompt)
    else:
        text, ids = prompt_text, token_ids(prompt)
    check_prompt(ids, max_model_len, vocab_size, template_tokens=template_tokens)
    check_stop_ids(params, vocab_size)
    return params, text, ids
