"""What a round's tokens become: committed output tokens, stop conditions, and `RequestOutput`.

`append_tokens` commits a round's tokens in order and says why the request finished (EOS, a stop
token or string, max_tokens, the context limit), dropping the tokens after that; `request_output`
is a request's current state as the engine hands it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from .request import Request


@dataclass(repr=False)
class RequestOutput:
    """A request's state as the engine hands it out after a round.

    `text` is decoded on first access, not when the output is made: the engine makes one output per
    request per round, and decoding the whole output every round cost O(n^2) in the output length
    (about 1% of a 256-token batch-1 generate here, and growing with length and batch) for text that
    `LLM.generate` reads only once, at the end. A running request's text (what a stream reads every
    round) comes from the request's incremental decoder, without a trailing incomplete character; a
    finished request's is one whole decode. Pickling (data-parallel shards send outputs to rank 0)
    decodes first."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    _text: "str | Callable[[], str]" = field(compare=False)  # the text, or how to decode it once
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
    def text(self) -> str:
        if callable(self._text):
            self._text = self._text()
        return self._text

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_text"] = self.text  # a decoder closure holds the tokenizer: send the text instead
        return state

    def __repr__(self) -> str:
        return (f"RequestOutput(request_id={self.request_id!r}, text={self.text!r}, token_ids={self.token_ids!r}, "
                f"finish_reason={self.finish_reason!r}, num_accepted_tokens={self.num_accepted_tokens})")


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
            # the incremental text holds back a token that ends in an incomplete character; the final
            # text is the whole decode, so the last check reads that
            if p.stop and match_stop_string(req, tokenizer, whole=True):
                return "stop"
            return "length"
    return None


def output_text(req: Request, tokenizer, ids) -> str:
    """The text of `ids` (the request's output, now or at an earlier round), through the request's
    incremental decoder where the tokenizer has one (models/tokenizer.TextStream)."""
    if req.text_stream is None:
        make = getattr(tokenizer, "text_stream", None)
        if make is None:
            return tokenizer.decode(ids)
        req.text_stream = make()
    return req.text_stream.text(ids)


def match_stop_string(req: Request, tokenizer, whole: bool = False) -> bool:
    """Whether the output's text now contains a stop string (then `req.stop_text_end` is where it
    starts). `whole`: search the whole decode instead of the incremental text (the last check)."""
    ids = req.output_token_ids
    text = tokenizer.decode(ids) if whole else output_text(req, tokenizer, ids)
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
    ids, end = list(req.output_token_ids), req.stop_text_end
    frozen = tuple(ids)  # this round's tokens, whatever later happens to the output's list
    final = req.finish_reason is not None or end is not None

    def decode() -> str:
        if not final:  # a running request's text (a streamed delta): incremental
            return output_text(req, tokenizer, frozen)
        text = tokenizer.decode(frozen)  # the final text: one whole decode (Tokenizer.decode takes any iterable)
        return text if end is None else text[:end]

    return RequestOutput(
        req.request_id, req.prompt, req.prompt_token_ids, ids, decode,
        req.finish_reason, req.arrival_time, req.first_token_time, req.finish_time,
        req.num_drafts, req.num_draft_tokens, req.num_accepted_tokens,
    )
