"""OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}` (issue 9).

A user's mistake is a 400 whose `param` names the field and whose message says the fix; pydantic
validation locations and `RequestError.param` are mapped onto `param`. A failure inside the
engine is a 500 that says what happened (the traceback goes to the log, not to the client).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import UserError

TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
         405: "invalid_request_error", 413: "invalid_request_error", 422: "invalid_request_error",
         429: "rate_limit_error", 500: "internal_server_error", 503: "service_unavailable"}


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": TYPES.get(status, "error"), "param": param,
                      "code": code if code is not None else status}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


class BodyError(StarletteHTTPException):
    """A request body that is not UTF-8 or not strict JSON (a duplicate key, nesting past the parser's
    limit, a number of too many digits): a 400 whose message says so (FastAPI's own reads "There was
    an error parsing the body"); `param` names the key when one is at fault."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(400, message)
        self.param = param


def _loc_param(loc: tuple | list) -> str | None:
    """("body", "messages", 0, "role") -> "messages[0].role"; the body itself -> None."""
    parts = [p for p in loc if p not in ("body", "query", "path")]
    # pydantic names union members in the location (e.g. "str", "list[int]"): drop them
    parts = [p for p in parts if not (isinstance(p, str) and ("[" in p or p in ("str", "int", "float", "bool")))]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or None


def validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """(message, param) of the first problem, phrased for a person."""
    err = errors[0]
    if err.get("type") == "json_invalid":
        detail = (err.get("ctx") or {}).get("error", "")
        return f"malformed JSON body ({detail}); send a JSON object", None
    param = _loc_param(err.get("loc", ()))
    kind, msg = err.get("type", ""), err.get("msg", "invalid value")
    if kind == "extra_forbidden":
        return f"{param}: unknown field, not supported by adaspec; remove it", param
    if kind == "missing" and param is None:
        return "the request body is empty; send a JSON object (Content-Type: application/json)", None
    if kind == "missing":
        return f"{param}: field required", param
    if kind in ("model_type", "dict_type", "model_attributes_type") and param is None:
        return ("the request body must be a JSON object (Content-Type: application/json), got "
                f"{type(err.get('input')).__name__}"), None
    msg = msg.removeprefix("Value error, ")
    where = param or "request"
    return (msg if msg.startswith(where) else f"{where}: {msg}"), param


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        message, param = validation_message(list(exc.errors()))
        return error_response(400, message, param)

    @app.exception_handler(ValidationError)
    async def _pydantic(request: Request, exc: ValidationError):
        message, param = validation_message(exc.errors())
        return error_response(400, message, param)

    @app.exception_handler(UserError)
    async def _user(request: Request, exc: UserError):
        return error_response(400, str(exc), exc.param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, str(exc.detail), getattr(exc, "param", None),
                              headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        import logging

        logging.getLogger("adaspec.server").exception("unhandled error on %s", request.url.path)
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")
