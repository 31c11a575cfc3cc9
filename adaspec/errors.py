"""The errors adaspec raises for a user's mistake, as opposed to its own bugs.

Every exception a user can cause by a wrong flag, JSON field, file, model directory or request
derives from `UserError`. Its message is one sentence that names the flag or field, the value and
the fix; `param` names the flag or field alone (the server's OpenAI error body reports it as
`param`). `cli.main` prints a `UserError` as one line and exits with `exit_code`; anything else is a
bug and keeps its traceback. This module imports nothing, so every layer may use it.
"""

from __future__ import annotations


class UserError(Exception):
    """A user's mistake; the message names the flag or field and the fix."""

    exit_code = 2

    def __init__(self, message: str = "", *, param: str | None = None):
        super().__init__(message)
        self.param = param


class RequestError(UserError, ValueError):
    """A request cannot be served as asked (R-B5); the message names the field (`param`)."""


class FlagError(UserError):
    """A command-line flag is unknown or its value cannot be parsed; `param` is the flag."""


class InputFileError(UserError, ValueError):
    """A file or directory the user named is missing, of the wrong kind, unreadable or malformed,
    or an output path is taken; `param` is the flag (or field) that named it."""


BUG_REPORT = ("this is a bug in adaspec, not a problem with your input: please report it to the adaspec "
              "maintainers (the project's issue tracker) with the command you ran and the traceback above")
