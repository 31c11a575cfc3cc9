"""LLM: the offline Python API over one LLMEngine (`LLM(model=...).generate(prompts, params)`).

Inputs are checked before anything is queued: prompts are text or token ids (a list of int) and
nothing else is converted; `chat=True` needs text; an unknown keyword argument is refused with the
closest EngineConfig field. The engine itself runs `adaspec.preflight` before any model work.
"""

from __future__ import annotations

from typing import Sequence

from ..config import ConfigError, EngineConfig
from ..errors import RequestError
from ..preflight import Checked
from ..preflight.requests import check_params, check_text, normalise_prompts
from ..sampling_params import SamplingParams
from .llm_engine import LLMEngine, RequestOutput, make_engine  # noqa: F401
from .request import Request


class LLM:
    """Offline API: `LLM(model=...).generate(prompts, SamplingParams(...))`.

    Keyword arguments are `EngineConfig` fields; an unknown one is a ConfigError naming it (with
    the closest field). Everything is checked before the weights load (adaspec.preflight)."""

    def __init__(self, model: str | None = None, drafter=None, *, checked: Checked | None = None, **config):
        if checked is not None:
            engine_config = checked.config
        else:
            engine_config = _engine_config(model, config)
        self.engine = make_engine(engine_config, drafter=drafter, checked=checked)
        self.tokenizer = self.engine.tokenizer

    def close(self) -> None:
        """Stop worker processes of a parallel engine (see LLMEngine.close)."""
        self.engine.close()

    def generate(
        self,
        prompts: str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        chat: bool = False,
        use_tqdm: bool = False,
    ) -> list[RequestOutput]:
        """Prompts: one str, one list of token ids (a flat list of int), or a list of either. With
        `chat=True` every prompt must be text: it is wrapped in the model's chat template. All
        requests are checked before any is queued (RequestError names the field)."""
        if not isinstance(chat, bool):
            raise RequestError(f"chat must be True or False, got {chat!r}", param="chat")
        if not isinstance(use_tqdm, bool):
            raise RequestError(f"use_tqdm must be True or False, got {use_tqdm!r}", param="use_tqdm")
        prompts = normalise_prompts(prompts)
        if isinstance(params, (list, tuple)):
            params_list = [check_params(p) for p in params]
        else:
            params_list = [check_params(params)] * len(prompts)
        if len(params_list) != len(prompts):
            raise RequestError(f"params: got {len(params_list)} SamplingParams for {len(prompts)} prompts; pass one for all, "
                               "or one per prompt", param="params")
        requests = []
        for i, (prompt, p) in enumerate(zip(prompts, params_list)):  # check all before queuing any
            if chat and not isinstance(prompt, str):
                raise RequestError(f"prompts[{i}]: chat=True needs text prompts (the chat template wraps text); pass "
                                   "the text, or chat=False for token ids", param="chat")
            if chat:
                if prompt == "":
                    raise RequestError(f"prompts[{i}]: empty prompt; send some text", param="prompt")
                check_text(prompt, f"prompts[{i}]")
                requests.append(self.engine.make_request(self.tokenizer.chat_prompt_ids(prompt), p, prompt_text=prompt,
                                                         template_tokens=len(self.tokenizer.encode(prompt))))
            else:
                requests.append(self.engine.make_request(prompt, p))
        return self.run(requests, use_tqdm)

    def run(self, requests: list[Request], use_tqdm: bool = False) -> list[RequestOutput]:
        """Queue checked requests (from `engine.make_request`) and step until all finish."""
        ids = [self.engine.enqueue(r) for r in requests]
        results: dict[str, RequestOutput] = {}
        bar = None
        if use_tqdm:
            from tqdm import tqdm

            bar = tqdm(total=len(ids), desc="generate", unit="req")
        while self.engine.has_unfinished():
            for out in self.engine.step():
                if out.finished:
                    results[out.request_id] = out
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        return [results[rid] for rid in ids]


def _engine_config(model, config: dict) -> EngineConfig:
    """EngineConfig from LLM's keyword arguments; an unknown name is refused with the closest one."""
    import dataclasses
    import difflib

    names = [f.name for f in dataclasses.fields(EngineConfig)]
    unknown = [k for k in config if k not in names]
    if unknown:
        close = difflib.get_close_matches(unknown[0], names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        sampling = " (a sampling parameter: pass it in SamplingParams to generate())" \
            if unknown[0] in SamplingParams.model_fields else ""
        raise ConfigError(f"LLM(): unknown engine argument {unknown[0]!r}{hint or sampling}; the arguments are "
                          "EngineConfig's fields (the CLI's engine flags)", param=unknown[0])
    return EngineConfig(model=model, **config)
