"""Bad prompts on the command line and in prompts files: refused in one line, before any model work.

Issue 8 / ground rule 4: missing, empty and non-UTF-8 prompts, prompts files of the wrong kind or
with malformed lines (unknown keys, labels of the wrong type, chat messages with unknown roles,
duplicate keys), prompts that do not fit the context or whose chat template does not. Split from
test_bad_inputs_cli.py (same helpers: `refused()` checks exit status 2, one error line naming the
flag, no traceback, no weights loaded, a fast answer).
"""

from __future__ import annotations

import json

import pytest

from refusal import refused
from test_bad_inputs_cli import _tiny, gen  # noqa: F401 (_tiny: the autouse fixture that points gen at the tiny model)

def test_missing_and_empty_prompts(capsys, monkeypatch, tmp_path):
    refused(gen(prompt=None), capsys, monkeypatch, "--prompt", contains=["no prompt"])
    refused(gen(prompt="--prompt="), capsys, monkeypatch, "--prompt", contains=["empty"])
    refused(gen("--chat=false", prompt="--prompt="), capsys, monkeypatch, "--prompt", contains=["empty"])  # same with chat off


PROMPT_FILES = [
    (None, "no such"),  # missing file
    ("DIR", "is a directory"),
    (b"\"ok\"\n\xff\xfe bad\n", "line 2 is not UTF-8"),
    (b"", "holds no prompts"),
    (b"\n  \n", "holds no prompts"),
    (b"42\n", "line 1 must be a string"),
    (b'{"text": "x"}\n', "unknown key 'text'"),
    (b'{"prompt": "x", "max_tokens": 5}\n', "unknown key 'max_tokens'"),
    (b'{"prompt": 5}\n', "\"prompt\" must be a string"),
    (b'{"prompt": "a", "messages": []}\n', "exactly one of"),
    (b'{"messages": [{"role": "user"}]}\n', "\"messages\""),
    (b'{"messages": "hi"}\n', "non-empty list"),
    (b'"fine"\n{broken\n', "line 2 is not JSON"),
    (b'"fine"\n""\n', "line 2 is empty"),
    # audit (issue 8)
    (b'{"messages": [{"role": "robot", "content": "x"}]}\n', "role must be one of"),  # was passed to the template
    (b'{"prompt": "x", "id": [1]}\n', "label \"id\""),
    (b'"\\ud800"\n', "lone surrogate"),  # JSON's escape of half a pair: was a tokenizer traceback
    (b'null\n', "got NoneType"), (b'["a", "b"]\n', "got list"),
    (b'{"messages": [{"role": "user", "content": 5}]}\n', "content must be a string"),
    (b'{"messages": [{"role": "user", "content": "x", "name": "bob"}]}\n', "exactly \"role\" and \"content\""),
    ("DEV", "not a regular file"),
    (b'{"prompt": "a", "prompt": "b"}\n', "appears twice"),
]


@pytest.mark.parametrize("content, text", PROMPT_FILES, ids=[t for _, t in PROMPT_FILES])
def test_bad_prompts_file(content, text, capsys, monkeypatch, tmp_path):
    path = tmp_path / "p.jsonl"
    if content == "DIR":
        path.mkdir()
    elif content == "DEV":
        path = "/dev/null"
    elif content is not None:
        path.write_bytes(content)
    refused(gen(f"--prompts_file={path}", prompt=None), capsys, monkeypatch, "--prompts_file", contains=[text])


def test_prompt_bytes_that_are_not_utf8_are_named(capsys, monkeypatch):
    """A non-UTF-8 byte in argv reaches Python as a lone surrogate; it was a tokenizer traceback."""
    refused(gen(prompt="--prompt=a\udcffb"), capsys, monkeypatch, "--prompt", contains=["0xFF", "not UTF-8"])


def test_chat_messages_need_the_chat_template(capsys, monkeypatch, tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    refused(gen(f"--prompts_file={path}", "--chat=false", prompt=None), capsys, monkeypatch, "--prompts_file",
            contains=["--chat=false"])


def test_prompt_too_long_is_refused_before_loading(capsys, monkeypatch):
    refused(gen("--max_model_len=16", "--chat=false", prompt="--prompt=" + "x" * 40), capsys, monkeypatch,
            "--prompt", contains=["context limit 16", "shorten"])


def test_chat_template_that_does_not_fit_is_named(capsys, monkeypatch):
    """`Hi` fits; the chat template around it does not: the message says so instead of "shorten the prompt"."""
    line = refused(gen("--max_model_len=6", prompt="--prompt=Hi"), capsys, monkeypatch, "--prompt",
                   contains=["chat template", "--chat=false"])
    assert "shorten" not in line


def test_model_without_chat_template_names_chat_false(capsys, monkeypatch, tiny_llama_dir, tmp_path):
    import shutil

    d = tmp_path / "nochat"
    shutil.copytree(tiny_llama_dir, d)
    for name in ("tokenizer_config.json",):
        cfg = json.loads((d / name).read_text())
        cfg.pop("chat_template", None)
        (d / name).write_text(json.dumps(cfg))
    for extra in d.glob("chat_template.*"):
        extra.unlink()
    refused(["generate", f"--model={d}", "--prompt=hi"], capsys, monkeypatch, "--chat", contains=["--chat=false"])


def test_max_tokens_that_cannot_fit_after_a_long_prompt_is_warned(capsys):
    """Audit (issue 8): the warning compared --max_tokens with the context alone, so a long prompt
    that leaves too little room ran silently to finish_reason=length."""
    from adaspec.cli import main

    rc = main(gen("--max_model_len=32", "--chat=false", "--max_tokens=20", "--json", prompt="--prompt=" + "x" * 20))
    out = capsys.readouterr()
    assert rc == 0 and json.loads(out.out)["outputs"][0]["finish_reason"] == "length"
    assert sum("--max_tokens=20 does not fit the context limit 32" in line and "longest prompt (21 tokens)" in line
               for line in out.err.splitlines()) == 1, out.err
