"""The target's tokenizer and chat template (R-A1, R-I1).

A thin wrapper over `transformers.AutoTokenizer` for a Hugging Face style model directory. Chat
prompts are rendered with the model's own template and then tokenised *without* adding special
tokens again (the template already writes BOS where the model wants it), as transformers does.
"""

from __future__ import annotations

from ..errors import UserError

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence


class NoChatTemplateError(UserError, ValueError):
    """The model has no chat template, so chat requests cannot be formatted for it."""


def _eos_from(path: Path) -> set[int]:
    try:
        value = json.loads(path.read_text()).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return set()
    if value is None:
        return set()
    if isinstance(value, (list, tuple)):
        return {int(v) for v in value}
    return {int(value)}


class Tokenizer:
    def __init__(self, model_dir: str | os.PathLike):
        from transformers import AutoTokenizer

        self.model_dir = Path(model_dir)
        self._tok = AutoTokenizer.from_pretrained(str(self.model_dir))
        eos: set[int] = set()
        if self._tok.eos_token_id is not None:
            eos.add(int(self._tok.eos_token_id))
        eos |= _eos_from(self.model_dir / "config.json")
        eos |= _eos_from(self.model_dir / "generation_config.json")
        self.eos_token_ids: frozenset[int] = frozenset(eos)

    @property
    def hf_tokenizer(self):
        """The underlying transformers tokenizer."""
        return self._tok

    @property
    def vocab_size(self) -> int:
        """Number of distinct token ids the tokenizer can produce (base vocabulary + added tokens)."""
        return len(self._tok)

    @property
    def bos_token_id(self) -> int | None:
        return self._tok.bos_token_id

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self._tok, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` with the special tokens the model normally adds (e.g. BOS for Llama)."""
        return list(self._tok.encode(text, add_special_tokens=True))

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """`encode` of each text, in one batched call (a fast tokenizer spreads it over the cores)."""
        if not texts:
            return []
        return [list(ids) for ids in self._tok(list(texts), add_special_tokens=True)["input_ids"]]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def text_stream(self) -> "TextStream":
        """An incremental decoder for one growing output (stop strings, streamed responses)."""
        return TextStream(self)

    def render_chat(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        """The prompt text of a chat conversation, in the model's template."""
        if not self.has_chat_template:
            raise NoChatTemplateError(
                f"the model at {self.model_dir} has no chat template: use plain completions "
                "(/v1/completions, or a raw prompt) instead of chat messages"
            )
        from jinja2 import TemplateError, TemplateSyntaxError

        try:
            return self._tok.apply_chat_template(
                [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt
            )
        except TemplateSyntaxError as e:  # the model directory's template is broken: the user's file, not a bug
            raise NoChatTemplateError(
                f"--model={self.model_dir}: its chat template cannot be rendered ({type(e).__name__}: {e}); repair "
                "the chat_template (tokenizer_config.json or chat_template.jinja), or send plain text "
                "(--chat=false, /v1/completions)", param="--model") from None
        except TemplateError as e:  # the template's own raise_exception(...): these messages do not fit it
            from ..errors import RequestError

            raise RequestError(f"messages: the model's chat template refuses them ({e})", param="messages") from None

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of a chat conversation ([{"role": ..., "content": ...}, ...]), ready for generation."""
        text = self.render_chat(messages, add_generation_prompt=add_generation_prompt)
        return list(self._tok.encode(text, add_special_tokens=False))

    def chat_prompt_ids(self, user_text: str, system: str | None = None) -> list[int]:
        """Token ids of a one-turn chat prompt ending with the assistant's generation prompt."""
        messages = ([{"role": "system", "content": system}] if system is not None else []) + [
            {"role": "user", "content": user_text}
        ]
        return self.apply_chat_template(messages, add_generation_prompt=True)


class TextStream:
    """The text of one request's growing output ids, decoded incrementally.

    Decoding the whole output again for every new token (to search stop strings, to stream a delta)
    costs O(n^2) in the output length: ~1.5 s of a 4096-token request here (BENCHMARKS.md, "Stop strings
    decode the whole output per token"). `tokenizers`' DecodeStream decodes each new id in context
    (~0.7 us) and holds back an incomplete UTF-8 character until it completes, so the text is the
    whole-output decode without its trailing U+FFFD (checked per tokenizer in tests). Where that
    cannot hold (no fast backend, or transformers' `clean_up_tokenization_spaces`, which rewrites
    the decoded text), every call decodes in full, as before.

    `text(ids)` is the text of `ids`, which extend or prefix the ids seen so far (an output only
    grows). Thread-safe: the engine's thread feeds it, a server's thread reads earlier outputs."""

    def __init__(self, tokenizer: Tokenizer):
        import threading

        hf = tokenizer.hf_tokenizer
        backend = getattr(hf, "backend_tokenizer", None)
        self._decode = tokenizer.decode
        self._stream = None
        if backend is not None and not getattr(hf, "clean_up_tokenization_spaces", False):
            try:
                from tokenizers.decoders import DecodeStream
            except ImportError:  # tokenizers < 0.21
                DecodeStream = None
            if DecodeStream is not None:
                self._backend, self._stream = backend, DecodeStream(skip_special_tokens=True)
        self._text = ""
        self._ends = [0]  # len(text) after the first n ids
        self._lock = threading.Lock()

    @property
    def incremental(self) -> bool:
        return self._stream is not None

    def text(self, ids) -> str:
        if self._stream is None:
            return self._decode(ids)
        n = len(ids)
        with self._lock:
            for i in range(len(self._ends) - 1, n):
                piece = self._stream.step(self._backend, int(ids[i]))
                if piece:
                    self._text += piece
                self._ends.append(len(self._text))
            return self._text[: self._ends[n]]
