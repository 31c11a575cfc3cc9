"""What a round's tokens become: committed output tokens, stop conditions, and `RequestOutput`.

`append_tokens` commits a round's tokens in order and says why the request finished (EOS, a stop
token or string, max_tokens, the context limit), dropping the tokens after that; `request_output`
is a request's current state as the engine hands it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .request import Request


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None  # "stop" | "length" | None while running
    arrival_time: float
    first_token_time: float | None
    finish_time: float | None
    # speculation of this request (R-I2): rounds that verified >= 1 draft token, drafted tokens
    # verified, accepted draft tokens (bonus excluded), as metrics.spec_stats counts them
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


def append_tokens(req: Request, tokens: Iterable[int], tokenizer, max_model_len: int) -> str | None:
    """Append `tokens` to the request's output until one finishes it; returns the finish reason
    ("stop" | "length") or None while it runs on. Later tokens of the round are dropped."""
    p = req.params
    eos = () if p.ignore_eos else tokenizer.eos_token_ids
    for token in tokens:
        req.output_token_ids.append(token)
        if token in eos or token in p.stop_token_ids:
            return "stop"
        if p.stop and match_stop_string(req, tokenizer):
            return "stop"
        if len(req.output_token_ids) >= p.max_tokens or req.num_tokens >= max_model_len:
            return "length"
    return None


def match_stop_string(req: Request, tokenizer) -> bool:
    text = tokenizer.decode(req.output_token_ids)
    # Only text from the last check on can complete a new match, however long the new token
    # is: search from the previously checked length, back by the longest stop string (minus
    # one) plus slack for a partial UTF-8 character at the old end that decodes differently now.
    longest = max(len(s) for s in req.params.stop)
    start = max(0, req.stop_checked_len - longest - 8)
    hits = [i for s in req.params.stop if (i := text.find(s, start)) >= 0]
    req.stop_checked_len = len(text)
    if hits:
        req.stop_text_end = min(hits)
        return True
    return False


def request_output(req: Request, tokenizer) -> RequestOutput:
    text = tokenizer.decode(req.output_token_ids)
    if req.stop_text_end is not None:
        text = text[: req.stop_text_end]
    return RequestOutput(
        req.request_id, req.prompt, req.prompt_token_ids, list(req.output_token_ids), text,
        req.finish_reason, req.arrival_time, req.first_token_time, req.finish_time,
        req.num_drafts, req.num_draft_tokens, req.num_accepted_tokens,
    )
