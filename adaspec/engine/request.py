"""A request's state as the engine sees it: tokens, what of them is in the KV cache, and its slot."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from ..sampling_params import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Request:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float = field(default_factory=time.perf_counter)
    output_token_ids: list[int] = field(default_factory=list)
    # Tokens whose keys/values are in the cache. While decoding this is len(all tokens) - 1:
    # the newest sampled token is written by the next forward.
    num_computed: int = 0
    slot: int | None = None
    status: Status = Status.WAITING
    finish_reason: str | None = None
    stop_text_end: int | None = None  # text is cut here when a stop string matched
    stop_checked_len: int = 0  # characters of output text already searched for stop strings
    text_stream: object | None = None  # the output's incremental decoder (Tokenizer.text_stream), made on first use
    first_token_time: float | None = None
    finish_time: float | None = None
    num_drafts: int = 0  # rounds in which this request verified >= 1 draft token
    num_draft_tokens: int = 0  # draft tokens verified
    num_accepted_tokens: int = 0  # draft tokens accepted (bonus excluded)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def prefilled(self) -> bool:
        return self.num_computed >= len(self.prompt_token_ids)

    def token_at(self, i: int) -> int:
        n = len(self.prompt_token_ids)
        return self.prompt_token_ids[i] if i < n else self.output_token_ids[i - n]

    def tokens(self, start: int, stop: int) -> list[int]:
        n = len(self.prompt_token_ids)
        if stop <= n:
            return self.prompt_token_ids[start:stop]
        return (self.prompt_token_ids + self.output_token_ids)[start:stop]

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED
