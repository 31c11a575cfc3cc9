"""Input paths: they exist, have the right kind, are readable, and their text/JSON parses (issue 8).

Every refusal is an `InputFileError` whose message starts with `--flag=value`, says what is wrong
(a directory where a file is expected is called a directory, a missing file missing) and the fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import InputFileError
from ..strict_json import DuplicateKeyError, loads


def input_file(path: str | os.PathLike, flag: str, what: str = "file") -> Path:
    """An existing, readable regular file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputFileError(f"{flag}={path}: no such {what}; pass an existing {what}", param=flag)
    if p.is_dir():
        raise InputFileError(f"{flag}={path} is a directory, not a {what}; pass the {what} itself", param=flag)
    if not p.is_file():
        raise InputFileError(f"{flag}={path} is not a regular file (a device or pipe?); pass a {what}", param=flag)
    if not os.access(p, os.R_OK):
        raise InputFileError(f"{flag}={path}: the {what} is not readable (permissions); fix them or pass another",
                             param=flag)
    return p


def input_dir(path: str | os.PathLike, flag: str, what: str = "directory") -> Path:
    """An existing, readable directory."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputFileError(f"{flag}={path}: no such {what}", param=flag)
    if not p.is_dir():
        raise InputFileError(f"{flag}={path} is a file, not a {what}", param=flag)
    if not os.access(p, os.R_OK | os.X_OK):
        raise InputFileError(f"{flag}={path}: the {what} is not readable (permissions)", param=flag)
    return p


def read_text(path: str | os.PathLike, flag: str, what: str = "file") -> str:
    """The file's text as UTF-8 (a BOM is allowed); a decoding error names the line."""
    p = input_file(path, flag, what)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputFileError(f"{flag}={path}: cannot read the {what} ({e.strerror})", param=flag) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise InputFileError(f"{flag}={path}: line {line} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset "
                             f"{e.start}); save the {what} as UTF-8", param=flag) from None


def read_json(path: str | os.PathLike, flag: str, what: str = "JSON file") -> Any:
    """The parsed JSON of a file; a syntax error names the line and column."""
    text = read_text(path, flag, what)
    if not text.strip():
        raise InputFileError(f"{flag}={path}: the {what} is empty; write a JSON object into it", param=flag)
    try:
        return loads(text)
    except json.JSONDecodeError as e:
        raise InputFileError(f"{flag}={path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}; fix the "
                             "syntax", param=flag) from None
    except DuplicateKeyError as e:
        raise InputFileError(f"{flag}={path}: {e}", param=flag) from None


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except OSError:
        return False
