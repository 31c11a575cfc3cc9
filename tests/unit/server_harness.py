"""Run adaspec's FastAPI app under uvicorn on 127.0.0.1 (a free port) in a thread, for tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import httpx


@contextlib.contextmanager
def serving(app, ready_timeout: float = 60.0, wait_ready: bool = True):
    """Yields the base URL; the server (and the app's engine thread) stop on exit."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_timeout
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    if wait_ready:
        wait_health(url, deadline)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def wait_health(url: str, deadline: float) -> None:
    while True:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the engine did not become ready"
        time.sleep(0.05)


def gauge(url: str, name: str, namespace: str = "adaspec") -> float:
    """The value of one unlabelled series of /metrics."""
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{namespace}:{name} "):
            return float(line.split()[-1])
    raise KeyError(name)


def wait_until(predicate, timeout: float = 10.0, every: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()
