"""AsyncEngine: one engine thread steps an LLMEngine for many asyncio clients (issue 9, R-I1).

- The engine is built *on* the engine thread (model load, warm-up, calibration), so a server can
  answer `/health` with 503 meanwhile; `ready` is set when it can serve, `startup_error` when the
  build failed (a UserError is the user's mistake: one line, exit 2).
- Requests are checked on the caller's thread (`check`: LLMEngine.make_request, which refuses
  before execution, R-B5) and then handed to the engine thread through a command queue. Every
  engine call (enqueue, abort, step) happens on the engine thread only.
- Each request has its own asyncio queue of `RequestOutput` snapshots (the cumulative state:
  tokens, text, finish reason); the engine thread puts into it with `call_soon_threadsafe`.
- `abort(request_id)` (client gone) stops the request and frees its slot at the next loop turn,
  before the next round is scheduled.
- A round that raises fails only its own requests (`LLMEngine.step` -> `RoundFailure`): each gets
  a `RequestFailed` item with the reason, the traceback is logged, and the loop goes on.
- `shutdown(cancel)`: stop accepting; with cancel=False the loop runs until every request has
  finished, with cancel=True remaining requests are aborted and end with finish reason "abort".
"""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback
from collections import deque
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from ..errors import RequestError, UserError
from .llm_engine import LLMEngine, RequestOutput
from .round_events import RoundFailure
from .request import Request

log = logging.getLogger("adaspec.engine")


class EngineNotReady(RuntimeError):
    """The engine is still starting (warm-up / calibration), failed to start, or is shutting down."""


class QueueFull(RuntimeError):
    """More requests are waiting for a slot than --max_queued_requests allows."""


@dataclass(frozen=True)
class RequestFailed:
    """The request's round raised; `message` says what happened (the server answers 500)."""

    request_id: str
    message: str


class _Stream:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()

    def put(self, item) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class AsyncEngine:
    def __init__(self, build: Callable[[], LLMEngine], max_queued_requests: int | None = None,
                 on_fatal: Callable[[BaseException], None] | None = None):
        self._build = build
        self.max_queued_requests = max_queued_requests
        self.on_fatal = on_fatal
        self.engine: LLMEngine | None = None
        self.ready = threading.Event()
        self.startup_error: BaseException | None = None
        self.stopping = False  # shutdown() was called: the loop ends once nothing runs
        self.draining = False  # new requests are refused (set on SIGTERM/SIGINT, before shutdown)
        self._cancel = False
        self._commands: deque = deque()
        self._wake = threading.Condition()
        self._streams: dict[str, _Stream] = {}
        self._queued = 0  # requests sent to the engine thread but not yet enqueued there
        self._thread: threading.Thread | None = None
        self.observers: list = []  # extra round observers, attached when the engine is built
        self.on_output: Callable[[RequestOutput, float], None] | None = None  # metrics hook (engine thread)
        self.on_failed: Callable[[str], None] | None = None

    # ---- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._main, name="adaspec-engine", daemon=True)
        self._thread.start()

    def shutdown(self, cancel: bool = False, timeout: float | None = None) -> None:
        """Stop accepting; finish (cancel=False) or abort (cancel=True) what runs; join the thread."""
        self.draining = self.stopping = True
        with self._wake:
            self._cancel = self._cancel or cancel
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    @property
    def state(self) -> str:
        if self.startup_error is not None:
            return "failed"
        if self.stopping or self.draining:
            return "stopping"
        return "ready" if self.ready.is_set() else "starting"

    # ---- requests (called on the event loop thread) ---------------------------------------
    @property
    def accepting(self) -> bool:
        return self.ready.is_set() and not (self.draining or self.stopping)

    def check(self, prompt, params, request_id: str, prompt_text: str | None = None) -> Request:
        """Validate a request before execution (raises RequestError naming the field)."""
        if not self.accepting:
            raise EngineNotReady(f"the engine is {self.state}")
        return self.engine.make_request(prompt, params, request_id, prompt_text)

    @property
    def num_waiting(self) -> int:
        return self._queued + (len(self.engine.scheduler.waiting) if self.engine is not None else 0)

    def submit(self, req: Request) -> _Stream:
        if not self.accepting:
            raise EngineNotReady(f"the engine is {self.state}")
        # requests that would wait for a slot, counting this one: queued + waiting - free slots
        would_wait = self.num_waiting - len(self.engine.scheduler.free_slots)
        if self.max_queued_requests is not None and would_wait >= self.max_queued_requests:
            raise QueueFull(f"{self.num_waiting} requests are already waiting for a slot "
                            f"(--max_queued_requests={self.max_queued_requests}); retry later")
        stream = _Stream(asyncio.get_running_loop())
        self._streams[req.request_id] = stream
        with self._wake:
            self._queued += 1
            self._commands.append(("add", req))
            self._wake.notify()
        return stream

    def abort(self, request_id: str) -> None:
        self._command(("abort", request_id))

    def generate(self, req: Request) -> AsyncIterator[RequestOutput]:
        """Submit now (QueueFull / EngineNotReady raise here) and return an async iterator of the
        request's output snapshots until it finishes. Leaving it early (the consumer stops
        iterating, is cancelled, or raises) aborts the request."""
        return self._iterate(req, self.submit(req))

    async def _iterate(self, req: Request, stream: _Stream) -> AsyncIterator[RequestOutput]:
        finished = False
        try:
            while True:
                item = await stream.queue.get()
                if isinstance(item, RequestFailed):
                    finished = True
                    raise RoundError(item.message)
                yield item
                if item.finished:
                    finished = True
                    return
        finally:
            if not finished:
                self.abort(req.request_id)

    # ---- the engine thread ----------------------------------------------------------------
    def _command(self, cmd) -> None:
        with self._wake:
            self._commands.append(cmd)
            self._wake.notify()

    def _main(self) -> None:
        try:
            self.engine = self._build()
            self.engine.round_observers.extend(self.observers)
        except BaseException as e:  # noqa: BLE001 - reported to the server, which exits
            self.startup_error = e
            if not isinstance(e, UserError):
                log.error("engine start-up failed:\n%s", traceback.format_exc())
            if self.on_fatal is not None:
                self.on_fatal(e)
            return
        self.ready.set()
        try:
            self._loop()
        except BaseException as e:  # noqa: BLE001 - a bug outside any round: fail everyone, stop
            log.error("engine loop crashed:\n%s", traceback.format_exc())
            for rid in list(self._streams):
                self._fail(rid, f"engine loop crashed: {type(e).__name__}: {e}")
            self.startup_error = e
            if self.on_fatal is not None:
                self.on_fatal(e)

    def _loop(self) -> None:
        eng = self.engine
        while True:
            with self._wake:
                while not self._commands and not eng.has_unfinished() and not self.stopping:
                    self._wake.wait()
                commands = list(self._commands)
                self._commands.clear()
                self._queued -= sum(kind == "add" for kind, _ in commands)
                cancel = self._cancel
            for kind, arg in commands:
                if kind == "add":
                    if cancel:
                        self._deliver_abort(arg.request_id, arg)
                        continue
                    eng.enqueue(arg)
                else:
                    self._abort(arg)
            if cancel:
                for rid in list(eng.requests):
                    self._abort(rid)
            if self.stopping and not eng.has_unfinished():
                with self._wake:
                    if not self._commands:  # else a request raced with shutdown: serve or cancel it
                        return
                continue
            if not eng.has_unfinished():
                continue
            try:
                outputs = eng.step()
            except RoundFailure as f:
                log.error("%s\n%s", f, "".join(traceback.format_exception(f.cause)))
                for rid in f.request_ids:
                    self._fail(rid, f"internal error while running this request's round: "
                                    f"{type(f.cause).__name__}: {f.cause}")
                for out in getattr(f, "outputs", ()):  # data parallel: other shards' outputs of the step
                    self._deliver(out)
                continue
            for out in outputs:
                self._deliver(out)

    def _deliver(self, out: RequestOutput) -> None:
        stream = self._streams.get(out.request_id)
        if out.finished:
            self._streams.pop(out.request_id, None)
        if self.on_output is not None:
            self.on_output(out)
        if stream is not None:
            stream.put(out)

    def _abort(self, request_id: str) -> None:
        req = self.engine.requests.get(request_id)
        self.engine.abort(request_id)
        self._deliver_abort(request_id, req)

    def _deliver_abort(self, request_id: str, req: Request | None) -> None:
        if req is None:
            self._streams.pop(request_id, None)
            return
        req.finish_reason = req.finish_reason or "abort"
        self._deliver(self.engine.output(req))

    def _fail(self, request_id: str, message: str) -> None:
        stream = self._streams.pop(request_id, None)
        if self.on_failed is not None:
            self.on_failed(request_id)
        if stream is not None:
            stream.put(RequestFailed(request_id, message))


class RoundError(RuntimeError):
    """Raised to the consumer of `generate` when the request's round failed (HTTP 500)."""


__all__ = ["AsyncEngine", "EngineNotReady", "QueueFull", "RequestError", "RequestFailed", "RoundError"]
