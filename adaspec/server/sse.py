"""OpenAI response bodies and server-sent-event chunks for completions and chat (R-I1).

Streaming follows OpenAI's format: `data: {json}\\n\\n` per chunk, `data: [DONE]\\n\\n` at the end;
chat streams start with a `{"role": "assistant"}` delta; `stream_options.include_usage` adds a
last chunk with empty `choices` and the `usage`. Text is streamed as the difference of the
detokenised output, holding back what may still change: a trailing partial UTF-8 character, and,
while stop strings are set, the last (longest stop - 1) characters (they may turn out to be the
start of a stop string, which is cut from the output).
"""

from __future__ import annotations

import json
import time

from ..engine.llm_engine import RequestOutput


def sse(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


DONE = sse("[DONE]")


class TextDelta:
    """Turns cumulative output text into the pieces to stream."""

    def __init__(self, stop: list[str]):
        self.emitted = ""
        self.hold = max((len(s) for s in stop), default=1) - 1

    def next(self, out: RequestOutput) -> str:
        text = out.text
        if not out.finished:
            text = text.rstrip("\ufffd")
            if self.hold:
                text = text[: max(len(self.emitted), len(text) - self.hold)]
        if not text.startswith(self.emitted):  # the tokenizer re-rendered the tail: send from here on
            common = 0
            while common < min(len(text), len(self.emitted)) and text[common] == self.emitted[common]:
                common += 1
            self.emitted = self.emitted[:common]
        piece = text[len(self.emitted):]
        self.emitted += piece
        return piece


def usage(out: RequestOutput) -> dict:
    n_prompt, n_out = len(out.prompt_token_ids), len(out.token_ids)
    return {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}


def acceptance(out: RequestOutput) -> dict:
    """Per-request speculation (an extra response field, ignored by OpenAI clients)."""
    return {
        "drafts": out.num_drafts,
        "draft_tokens": out.num_draft_tokens,
        "accepted_tokens": out.num_accepted_tokens,
        "acceptance_rate": round(out.num_accepted_tokens / out.num_draft_tokens, 4) if out.num_draft_tokens else None,
        "mean_acceptance_length": round(1 + out.num_accepted_tokens / out.num_drafts, 4) if out.num_drafts else None,
    }


def finish_reason(out: RequestOutput) -> str | None:
    return out.finish_reason


class Shapes:
    """Builds the JSON bodies of one request (completion or chat)."""

    def __init__(self, chat: bool, request_id: str, model: str):
        self.chat, self.id, self.model = chat, request_id, model
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def full(self, out: RequestOutput) -> dict:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": out.text},
                      "logprobs": None, "finish_reason": finish_reason(out)}
        else:
            choice = {"index": 0, "text": out.text, "logprobs": None, "finish_reason": finish_reason(out)}
        return {**self._head(self.object), "choices": [choice], "usage": usage(out), "acceptance": acceptance(out)}

    def chunk(self, piece: str | None, reason: str | None = None, role: bool = False) -> dict:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        if self.chat:
            delta: dict = {"role": "assistant", "content": ""} if role else ({} if piece is None else {"content": piece})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": reason}
        return {**self._head(obj), "choices": [choice]}

    def usage_chunk(self, out: RequestOutput) -> dict:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage(out)}
