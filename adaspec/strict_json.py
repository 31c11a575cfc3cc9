"""JSON parsing that refuses duplicate keys (issue 8): `json.loads` keeps the last of two equal
keys silently, so a hand-edited config or cost table could lose a value without a word. Used by
every reader of a user's JSON file (preflight/paths.py, calibration/files.py, commands/prompts.py).
This module imports nothing from adaspec, so every layer may use it."""

from __future__ import annotations

import json
from typing import Any


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (`key`)."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKeyError(f"key {k!r} appears twice in one object (only the last would count); keep one", k)
        out[k] = v
    return out


def loads(text: str) -> Any:
    """json.loads, but a duplicate key raises DuplicateKeyError (json.JSONDecodeError as usual otherwise)."""
    return json.loads(text, object_pairs_hook=_unique_pairs)
