"""`adaspec serve` and `adaspec bench-serve` (issue 9).

`serve` takes exactly the engine flags of `generate` / `calibrate` (cli.add_engine_flags) and builds
its EngineConfig with the same function (`cli.engine_config`), so every refusal `generate` gives,
`serve` gives before it binds the port; then `adaspec.preflight` checks every file, saved table and
model config without loading weights; only then is the port bound. The engine is built on the engine thread while the server answers
`/health` with 503; a start-up error there is still reported as one line with exit status 2.
SIGTERM / SIGINT: stop accepting (503), let in-flight requests finish for up to
--shutdown_timeout seconds, cancel the rest, exit 0.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import socket
import sys
import threading

from ..errors import UserError
from ..flags import finite_float

SHUTDOWN_BACKSTOP_S = 10.0  # uvicorn cancels response tasks this long after the engine aborted their requests
SERVER_EXTRA = "pip install 'adaspec[server]'  (or: pip install -e '.[server]' in a checkout)"


class ServeError(UserError, ValueError):
    """A serve-only flag is wrong."""


def add_server_commands(sub, add_engine_flags) -> None:
    """Add the `serve` and `bench-serve` subparsers (cli.COMMANDS runs cmd_serve / bench_cli.cmd_bench_serve)."""
    from .bench_cli import add_bench_flags

    serve = sub.add_parser("serve", help="OpenAI-compatible HTTP server with Prometheus /metrics",
                           description="Serve /v1/completions and /v1/chat/completions (streaming and not), "
                                       "/v1/models, /health, /metrics and /version. Engine flags are those of "
                                       "`adaspec generate`. Needs the server extra: " + SERVER_EXTRA,
                           allow_abbrev=False)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 = all)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 = any free port, printed)")
    serve.add_argument("--served_model_name", default=None,
                       help="model name clients send and /v1/models lists (default: the model's file/directory name)")
    serve.add_argument("--api_key", default=None,
                       help="if set, /v1 requests need 'Authorization: Bearer KEY' (else 401)")
    serve.add_argument("--max_queued_requests", type=int, default=256,
                       help="requests allowed to wait for a slot; beyond it requests get 429 (default 256)")
    serve.add_argument("--metrics_namespace", default="adaspec",
                       help="prefix of the Prometheus metric names, <ns>:... (default adaspec)")
    serve.add_argument("--shutdown_timeout", type=finite_float, default=30.0,
                       help="seconds in-flight requests may still run after SIGTERM/SIGINT before they are "
                            "cancelled (default 30)")
    add_engine_flags(serve)

    bench = sub.add_parser("bench-serve", help="load-test an OpenAI-compatible server (ours, vLLM, llama.cpp)",
                           description="asyncio load generator: fixed concurrency or Poisson rate, prompt sets "
                                       "shipped with adaspec, vllm-bench-serve JSON keys, acceptance from /metrics.",
                           allow_abbrev=False)
    add_bench_flags(bench)


def require_server_extra(command: str = "serve") -> None:
    missing = []
    for mod in ("fastapi", "uvicorn", "prometheus_client"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod.replace("_", "-"))
    if missing:
        raise ServeError(f"adaspec {command} needs the server extra ({', '.join(missing)} not installed): "
                         f"{SERVER_EXTRA}")


def _check_serve_flags(args: argparse.Namespace) -> None:
    if not args.host.strip():  # an empty host would listen on every interface
        raise ServeError("--host: empty; give an address (127.0.0.1 = this machine only, 0.0.0.0 = all interfaces)",
                         param="--host")
    if not 0 <= args.port <= 65535:
        raise ServeError(f"--port={args.port}: must be 0..65535", param="--port")
    if args.max_queued_requests < 0:
        raise ServeError(f"--max_queued_requests={args.max_queued_requests}: must be >= 0", param="--max_queued_requests")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.metrics_namespace):
        raise ServeError(f"--metrics_namespace={args.metrics_namespace!r}: use letters, digits and _ "
                         "(not starting with a digit)", param="--metrics_namespace")
    if args.shutdown_timeout < 0:
        raise ServeError(f"--shutdown_timeout={args.shutdown_timeout}: must be >= 0", param="--shutdown_timeout")
    if args.served_model_name is not None and not args.served_model_name.strip():
        raise ServeError("--served_model_name: empty; give a name or drop the flag", param="--served_model_name")
    if args.api_key is not None and not args.api_key:
        raise ServeError("--api_key: empty; give a key or drop the flag", param="--api_key")
    if args.api_key is not None and args.api_key != args.api_key.strip():  # HTTP strips header values: never matches
        raise ServeError("--api_key: starts or ends with white space, which no client can send in the Authorization "
                         "header (HTTP strips it); remove the spaces", param="--api_key")


def default_model_name(model: str | None) -> str:
    if model is None:
        return "SmolLM2-135M-Instruct"
    from pathlib import Path

    p = Path(model.rstrip("/"))
    return p.stem if p.suffix.lower() == ".gguf" else p.name


def _bind(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        raise ServeError(f"--host={host} --port={port}: cannot listen there ({e.strerror}); "
                         "choose another --port (or --port=0 for any free one)", param="--port") from None
    sock.set_inheritable(True)
    return sock


def cmd_serve(args: argparse.Namespace) -> int:
    require_server_extra()
    from .. import cli
    from ..preflight import preflight

    config = cli.engine_config(args)  # the refusals `generate` gives, before the port is bound
    _check_serve_flags(args)
    checked = preflight(config)  # every file, table and model-config check, before any model work
    for w in checked.warnings:
        print(f"adaspec serve: warning: {w}", file=sys.stderr)
    from ..parallel.launch import is_worker_process

    if is_worker_process(config):  # torchrun rank > 0 or --node_rank > 0: serve rank 0, bind no port
        from ..engine.llm_engine import make_engine

        make_engine(config, checked=checked)  # becomes a worker and exits when rank 0 stops
        return 0

    import uvicorn

    from ..engine.async_engine import AsyncEngine
    from ..engine.llm_engine import make_engine
    from .app import ServerSettings, build_app

    logging.basicConfig(level=logging.INFO, format="[adaspec] %(message)s", stream=sys.stderr)
    name = args.served_model_name or default_model_name(config.model)
    server: uvicorn.Server | None = None

    def fatal(e: BaseException) -> None:
        if server is not None:
            server.should_exit = True

    engine = AsyncEngine(lambda: _build(make_engine, config, checked), max_queued_requests=args.max_queued_requests,
                         on_fatal=fatal)
    app = build_app(engine, ServerSettings(name, args.api_key, args.metrics_namespace))
    sock = _bind(args.host, args.port)
    host, port = sock.getsockname()[:2]

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):  # SIGTERM / SIGINT: refuse new requests from now on (503)
            if not engine.draining:
                print(f"[adaspec] serve: {signal.Signals(sig).name}: no new requests; finishing in-flight ones "
                      f"(up to {args.shutdown_timeout:g} s)", file=sys.stderr, flush=True)
                # past the timeout the engine aborts what still runs, so every response ends itself (finish
                # reason "abort") before uvicorn's own backstop would cancel its task with a logged traceback
                timer = threading.Timer(args.shutdown_timeout, engine.shutdown, kwargs={"cancel": True, "timeout": 0})
                timer.daemon = True
                timer.start()
            engine.draining = True
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                   timeout_graceful_shutdown=args.shutdown_timeout + SHUTDOWN_BACKSTOP_S))
    # uvicorn restores the handlers it found and re-raises the signal it caught after a graceful
    # shutdown; these make that re-raise a no-op, so a requested shutdown exits with status 0.
    previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGTERM, signal.SIGINT)}
    print(f"[adaspec] serve: listening on http://{host}:{port} (model {name!r}); /health answers 503 until "
          "the engine is ready", file=sys.stderr, flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        engine.shutdown(cancel=True, timeout=10)
    if engine.startup_error is not None:
        if isinstance(engine.startup_error, UserError):
            raise engine.startup_error
        print(f"[adaspec] serve: the engine failed: {type(engine.startup_error).__name__}: "
              f"{engine.startup_error}", file=sys.stderr)
        return 1
    print("[adaspec] serve: stopped", file=sys.stderr, flush=True)
    return 0


def _build(make_engine, config, checked):
    engine = make_engine(config, checked=checked)
    print("[adaspec] serve: engine ready", file=sys.stderr, flush=True)
    return engine
