"""Helpers of the bad-input tests (issue 8): run `adaspec ...` in-process and check the refusal.

`refused(...)` asserts what every refusal must do: the documented exit code, one error line that
names the flag or field, no traceback, and -- for what is knowable at start-up -- no model loaded
(the loader is replaced by a function that fails the test) and an answer within a few seconds.
"""

from __future__ import annotations

import time

import pytest

from adaspec.cli import main

FAST_S = 5.0  # "answered within a few seconds" on this 2-core machine (a model load + warm-up takes longer)


def no_model_load(monkeypatch) -> None:
    """Any weights load fails the test: the refusal must come before it."""
    import adaspec.models.loader as loader

    def boom(*a, **k):
        pytest.fail("the model was loaded before the bad input was refused")

    monkeypatch.setattr(loader, "load_model", boom)


def refused(argv, capsys, monkeypatch, names, *, code: int = 2, loads: bool = False, contains=()) -> str:
    """Run `adaspec argv` and check the refusal; returns the error line."""
    if not loads:
        no_model_load(monkeypatch)
    t0 = time.perf_counter()
    rc = main(list(argv))
    elapsed = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert rc == code, f"exit {rc}, expected {code}: {err}"
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1, err  # exactly one error line ...
    line = errors[0]
    assert line.startswith("adaspec"), line
    for name in [names] if isinstance(names, str) else names:  # ... naming the flag or field
        assert name in line, f"{name!r} not in {line!r}"
    for text in contains:
        assert text in line, f"{text!r} not in {line!r}"
    if not loads:
        assert elapsed < FAST_S, f"took {elapsed:.1f} s"
    return line


def raises_user_error(fn, exc_type, param=None, contains=()):
    """Call fn(); it must raise `exc_type` (a UserError) whose param and message name the field."""
    from adaspec.errors import UserError

    with pytest.raises(exc_type) as e:
        fn()
    assert isinstance(e.value, UserError), type(e.value)
    msg = str(e.value)
    assert "\n" not in msg.strip() or msg.count("\n") < 4, msg
    if param is not None:
        assert e.value.param == param, (e.value.param, msg)
        assert param.lstrip("-") in msg, msg
    for text in contains:
        assert text in msg, f"{text!r} not in {msg!r}"
    return e.value
