"""The OpenAI endpoints: request -> checks (before execution) -> engine -> JSON or SSE (R-I1, R-B5).

Order of checks, each answered before the engine sees the request: engine ready (503), model name
(400), features adaspec does not implement (400), prompt / chat template and context length,
sampling ranges and R-B5 / R-E3 refusals (`LLMEngine.make_request`, 400), queue limit (429).
A client that disconnects has its request aborted at once (streaming: Starlette cancels the
stream; non-streaming: a watcher of `http.disconnect`); the slot is free before the next round.
"""

from __future__ import annotations

import asyncio
import json
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute

from ..engine.async_engine import EngineNotReady, QueueFull, RoundError
from ..errors import RequestError
from . import sse
from .errors import BodyError, error_response
from .protocol import ChatCompletionRequest, CompletionRequest


class Serving:
    def __init__(self, engine, model_name: str):
        self.engine, self.model_name = engine, model_name

    # ---- shared path ---------------------------------------------------------------------
    def _check_model(self, body) -> None:
        if body.model is not None and body.model != self.model_name:
            raise _ModelNotFound(body.model)

    async def handle(self, body, request: Request, chat: bool):
        if not self.engine.accepting:
            return error_response(503, f"the engine is {self.engine.state}; retry when /health returns 200")
        try:
            self._check_model(body)
        except _ModelNotFound as e:
            return error_response(400, f"model {e.args[0]!r} is not served here; use {self.model_name!r} "
                                       "(see /v1/models)", "model", "model_not_found")
        body.unsupported()
        eng = self.engine.engine
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        if chat:
            prompt = eng.tokenizer.apply_chat_template(body.conversation(),
                                                       add_generation_prompt=body.add_generation_prompt is not False)
            default_max = max(1, eng.max_model_len - len(prompt))
            prompt_text = None
        else:
            prompt = body.single_prompt()
            default_max = 16  # OpenAI's default for completions
            prompt_text = prompt if isinstance(prompt, str) else None
        params = body.sampling_params(default_max)
        try:
            req = self.engine.check(prompt, params, request_id, prompt_text)
        except RequestError as e:
            if chat and e.param == "prompt":
                raise RequestError(str(e).replace("prompt:", "messages:", 1), param="messages") from None
            raise
        named = "max_completion_tokens" if chat and body.max_completion_tokens is not None else "max_tokens"
        _fit_max_tokens(req, body.max_tokens is not None, eng.max_model_len, "messages" if chat else "prompt", named)
        try:
            outputs = self.engine.generate(req)
        except QueueFull as e:
            return error_response(429, str(e), None, "queue_full")
        except EngineNotReady as e:
            return error_response(503, str(e))
        shapes = sse.Shapes(chat, request_id, self.model_name)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(self._stream(outputs, shapes, params.stop, include_usage, request_id),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return await self._full(outputs, shapes, request, request_id)

    async def _stream(self, outputs, shapes: sse.Shapes, stop: list[str], include_usage: bool, request_id: str):
        delta = sse.TextDelta(stop)
        last = None
        try:
            if shapes.chat:
                yield sse.sse(shapes.chunk(None, role=True))
            async for out in outputs:
                last = out
                piece = delta.next(out)
                if out.finished:
                    if piece:
                        yield sse.sse(shapes.chunk(piece))
                    yield sse.sse(shapes.chunk(None if shapes.chat else "", reason=out.finish_reason))
                elif piece:
                    yield sse.sse(shapes.chunk(piece))
            if include_usage and last is not None:
                yield sse.sse(shapes.usage_chunk(last))
        except RoundError as e:  # the status line is already sent: report in the stream, as vLLM does
            from .errors import error_body

            yield sse.sse(error_body(500, str(e)))
        finally:
            await outputs.aclose()
            if last is None or not last.finished:
                self.engine.abort(request_id)  # also when the stream closed before its first item
        yield sse.DONE

    async def _full(self, outputs, shapes: sse.Shapes, request: Request, request_id: str):
        async def collect():
            last = None
            async for out in outputs:
                last = out
            return last

        task = asyncio.ensure_future(collect())
        watcher = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if task not in done:  # the client left: abort now (the iterator's exit aborts the request)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self.engine.abort(request_id)
            return JSONResponse({"error": "client disconnected"}, status_code=499)
        try:
            out = task.result()
        except RoundError as e:
            return error_response(500, str(e))
        return JSONResponse(shapes.full(out))


def _fit_max_tokens(req, explicit: bool, max_model_len: int, what: str, name: str = "max_tokens") -> None:
    """A requested max_tokens that cannot fit after the prompt is a 400 (as vLLM answers), not a
    silent cut; the completions default (16) is lowered to what fits."""
    room = max_model_len - len(req.prompt_token_ids)
    if req.params.max_tokens <= room:
        return
    if explicit:
        raise RequestError(f"{name}={req.params.max_tokens}: the {what} has {len(req.prompt_token_ids)} tokens, so "
                           f"at most {room} new tokens fit the context limit {max_model_len} (--max_model_len); lower "
                           f"{name} to at most {room} or shorten the {what}", param=name)
    req.params = req.params.model_copy(update={"max_tokens": room})


class _ModelNotFound(Exception):
    pass


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class StrictJSONRequest(Request):
    """The body parsed as every user JSON is (strict_json): a key named twice is refused, not kept
    last; a body that is not UTF-8, nests past the parser's limit or holds a number of too many digits
    gets a 400 saying which. Malformed JSON still reaches FastAPI's own 400 (JSONDecodeError)."""

    async def json(self):
        if not hasattr(self, "_json"):
            from ..strict_json import DuplicateKeyError, loads

            body = await self.body()
            try:
                self._json = loads(body)
            except UnicodeDecodeError as e:
                raise BodyError(f"the request body is not UTF-8 text (byte 0x{body[e.start]:02X} at offset {e.start}); "
                                "send JSON encoded as UTF-8") from None
            except DuplicateKeyError as e:
                raise BodyError(f"malformed JSON body: {e}", e.key) from None
            except RecursionError:
                raise BodyError("malformed JSON body: it nests arrays or objects too deeply; send a JSON object "
                                "as the API describes") from None
            except json.JSONDecodeError:
                raise
            except ValueError as e:  # e.g. Python's limit on the digits of an integer
                raise BodyError(f"malformed JSON body ({str(e).split(';')[0]}); send a JSON object as the API "
                                "describes") from None
        return self._json


class StrictJSONRoute(APIRoute):
    def get_route_handler(self):
        handler = super().get_route_handler()

        async def strict(request: Request):
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict


def make_router(serving: Serving) -> APIRouter:
    router = APIRouter(route_class=StrictJSONRoute)

    @router.post("/v1/completions", summary="OpenAI completions (streaming with stream=true)")
    async def completions(body: CompletionRequest, request: Request):
        return await serving.handle(body, request, chat=False)

    @router.post("/v1/chat/completions", summary="OpenAI chat completions (streaming with stream=true)")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        return await serving.handle(body, request, chat=True)

    return router
