"""The FastAPI application: OpenAI endpoints, /v1/models, /health, /metrics, /version (issue 9).

`build_app(async_engine, settings)` wires an `AsyncEngine` (engine/async_engine.py) into the
routes; the engine thread starts in the app's lifespan and is stopped when the app shuts down
(uvicorn does that after a SIGTERM/SIGINT once in-flight responses have ended, or were cancelled at
its graceful-shutdown timeout). `--api_key` protects the `/v1` endpoints (401 otherwise);
`/health`, `/metrics` and `/version` stay open for probes and scrapers, as in vLLM.
"""

from __future__ import annotations

import hmac
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .. import __version__
from ..metrics.prometheus import ServerMetrics
from . import errors
from .errors import error_response
from .routes import Serving, make_router


@dataclass(frozen=True)
class ServerSettings:
    model_name: str
    api_key: str | None = None
    metrics_namespace: str = "adaspec"
    shutdown_cancel: bool = True  # abort what is still running when the app stops


def build_app(engine, settings: ServerSettings, metrics: ServerMetrics | None = None) -> FastAPI:
    metrics = metrics or ServerMetrics(settings.metrics_namespace)
    metrics.bind(engine)
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        engine.start()
        yield
        engine.draining = True
        import asyncio

        await asyncio.get_running_loop().run_in_executor(None, engine.shutdown, settings.shutdown_cancel, 60.0)

    app = FastAPI(title="adaspec", version=__version__, lifespan=lifespan,
                  description="OpenAI-compatible server of adaspec (adaptive speculative decoding).")
    app.state.engine, app.state.metrics, app.state.settings = engine, metrics, settings
    errors.install(app)

    @app.middleware("http")
    async def auth(request: Request, call_next):
        if settings.api_key and request.url.path.startswith("/v1"):
            header = request.headers.get("authorization", "")
            given = header[7:] if header.lower().startswith("bearer ") else ""
            if not hmac.compare_digest(given.encode(), settings.api_key.encode()):
                return error_response(401, "missing or wrong API key: send the header "
                                           "'Authorization: Bearer <key>' with the server's --api_key",
                                      None, "invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        return await call_next(request)

    app.include_router(make_router(Serving(engine, settings.model_name)))

    @app.get("/v1/models", summary="The served model")
    async def models():
        eng = engine.engine
        card = {"id": settings.model_name, "object": "model", "created": created, "owned_by": "adaspec"}
        if eng is not None:
            card["max_model_len"] = eng.max_model_len
        return {"object": "list", "data": [card]}

    @app.get("/health", summary="200 when ready; 503 while starting (warm-up, calibration) or stopping")
    async def health():
        state = engine.state
        body = {"status": state}
        if engine.startup_error is not None:
            body["error"] = str(engine.startup_error)
        return JSONResponse(body, status_code=200 if state == "ready" else 503)

    @app.get("/version", summary="adaspec's version, and the target's linear backend and layer kernels once it is loaded")
    async def version():
        body = {"version": __version__}
        if engine.engine is not None:  # part of the target's identity (issue 14)
            body["linear_backend"] = engine.engine.linear_backend
            body["layer_kernels"] = engine.engine.layer_kernels
        return body

    @app.get("/metrics", summary="Prometheus metrics (text exposition format)")
    async def prometheus_metrics():
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app
