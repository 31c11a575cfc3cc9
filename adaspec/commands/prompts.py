"""The prompts of `adaspec generate`: `--prompt` (repeatable) and `--prompts_file` (JSONL).

A prompts file holds one prompt per line (blank lines are skipped): a JSON string, an object
`{"prompt": "..."}`, or, with the chat template on, `{"messages": [{"role": ..., "content": ...}, ...]}`.
Objects may also carry `"kind"` and `"id"` labels (the shipped prompt sets do); any other key is
refused, because per-prompt parameters are not read from the file. Every error names the flag
and, for the file, the line (`--prompts_file=p.jsonl line 3: ...`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import InputFileError, UserError
from ..preflight.paths import read_text
from ..strict_json import DuplicateKeyError, loads

LABEL_KEYS = ("kind", "id")
CHAT_ROLES = ("system", "user", "assistant", "developer")  # the server's ChatMessage roles


@dataclass(frozen=True)
class Prompt:
    text: str | None  # a plain prompt
    messages: tuple[dict, ...] | None  # a chat conversation (prompts file only)
    origin: str  # where it came from, for messages: "--prompt #2", "--prompts_file=p.jsonl line 3"
    flag: str  # "--prompt" | "--prompts_file"

    @property
    def shown(self) -> Any:
        return self.text if self.messages is None else list(self.messages)


def _check_text(text: str, origin: str, flag: str) -> None:
    from ..preflight.requests import check_text

    try:
        check_text(text, origin, flag)
    except UserError as e:  # "--prompt #1: character 0 is a lone surrogate ..." (bytes that are not UTF-8 in argv)
        raise InputFileError(str(e), param=flag) from None


def _ordinal(n: int) -> str:
    return f"#{n}"


def _messages(value: Any, origin: str) -> tuple[dict, ...]:
    def bad(why: str):
        return InputFileError(f"{origin}: \"messages\" {why}; write [{{\"role\": \"user\", \"content\": \"...\"}}, ...]",
                              param="--prompts_file")

    if not isinstance(value, list) or not value:
        raise bad("must be a non-empty list")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise bad(f"[{i}] must be an object with exactly \"role\" and \"content\"")
        if m["role"] not in CHAT_ROLES:
            raise bad(f"[{i}].role must be one of {', '.join(CHAT_ROLES)} (as the server accepts), got {m['role']!r}")
        if not isinstance(m["content"], str):
            raise bad(f"[{i}].content must be a string")
        _check_text(m["content"], f"{origin}: \"messages\"[{i}].content", "--prompts_file")
        out.append({"role": "system" if m["role"] == "developer" else m["role"], "content": m["content"]})
    return tuple(out)


def _file_prompts(path: str, chat: bool) -> list[Prompt]:
    flag = "--prompts_file"
    text = read_text(path, flag, "prompts file")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        origin = f"{flag}={path} line {n}"
        try:
            item = loads(line)
        except DuplicateKeyError as e:
            raise InputFileError(f"{origin}: {e}", param=flag) from None
        except json.JSONDecodeError as e:
            raise InputFileError(f"{origin} is not JSON ({e.msg} at column {e.colno}); write one JSON string or "
                                 "object per line", param=flag) from None
        if isinstance(item, str):
            out.append(Prompt(item, None, origin, flag))
            continue
        if not isinstance(item, dict):
            raise InputFileError(f"{origin} must be a string or an object with a \"prompt\" string, got "
                                 f"{type(item).__name__}", param=flag)
        keys = [k for k in item if k not in ("prompt", "messages", *LABEL_KEYS)]
        if keys:
            raise InputFileError(f"{origin}: unknown key {keys[0]!r} (allowed: prompt or messages, plus the labels "
                                 f"{', '.join(LABEL_KEYS)}); sampling parameters are flags, not per-line fields",
                                 param=flag)
        if ("prompt" in item) == ("messages" in item):
            raise InputFileError(f"{origin} needs exactly one of \"prompt\" (a string) and \"messages\" (a chat)",
                                 param=flag)
        for key in LABEL_KEYS:
            if key in item and (isinstance(item[key], bool) or not isinstance(item[key], (str, int))):
                raise InputFileError(f"{origin}: label \"{key}\" must be a string or an integer, got "
                                     f"{type(item[key]).__name__}", param=flag)
        if "prompt" in item:
            if not isinstance(item["prompt"], str):
                raise InputFileError(f"{origin}: \"prompt\" must be a string, got {type(item['prompt']).__name__}",
                                     param=flag)
            out.append(Prompt(item["prompt"], None, origin, flag))
        else:
            if not chat:
                raise InputFileError(f"{origin} is a chat (\"messages\"), which needs the chat template: drop "
                                     "--chat=false, or write a \"prompt\" string", param=flag)
            out.append(Prompt(None, _messages(item["messages"], origin), origin, flag))
    if not out:
        raise InputFileError(f"{flag}={path} holds no prompts (it is empty or blank); write one JSON string or "
                             "object per line", param=flag)
    return out


def read_prompts(prompt_flags: list[str], prompts_file: str | None, chat: bool) -> list[Prompt]:
    """Every prompt of the command line, in order: `--prompt`s first, then the file's lines."""
    out = [Prompt(p, None, f"--prompt {_ordinal(i)}", "--prompt") for i, p in enumerate(prompt_flags, 1)]
    if prompts_file is not None:
        if prompts_file == "":
            raise InputFileError("--prompts_file= is empty: pass a JSONL file", param="--prompts_file")
        out += _file_prompts(prompts_file, chat)
    if not out:
        raise UserError("no prompt given: pass --prompt=TEXT (repeatable) or --prompts_file=FILE.jsonl",
                        param="--prompt")
    for p in out:
        if p.text == "":
            raise UserError(f"{p.origin} is empty; give it some text (an empty prompt has nothing to continue)",
                            param=p.flag)
        if p.text is not None:
            _check_text(p.text, p.origin, p.flag)
    return out


def prompt_ids(prompt: Prompt, tokenizer, chat: bool) -> tuple[list[int], int | None]:
    """(token ids, tokens before the chat template or None) of one prompt."""
    if prompt.messages is not None:
        return tokenizer.apply_chat_template(prompt.messages), None
    if chat:
        return tokenizer.chat_prompt_ids(prompt.text), len(tokenizer.encode(prompt.text))
    return tokenizer.encode(prompt.text), None
