"""Start `adaspec serve --port=0` as a subprocess on 127.0.0.1 and wait until /health is 200."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx


def start_server(args: list[str], timeout: float = 240.0):
    """Returns (process, base URL) once /health is 200; the process's stderr stays readable (text)."""
    return wait_ready(launch(args), timeout)


def launch(args: list[str]):
    """Start the process (model loading runs while the caller does other work)."""
    return subprocess.Popen([sys.executable, "-m", "adaspec.cli", "serve", "--port=0", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def wait_ready(proc, timeout: float = 240.0):
    deadline = time.monotonic() + timeout
    url, lines = None, []
    while url is None:
        line = proc.stderr.readline()
        lines.append(line)
        assert line or proc.poll() is None, "".join(lines)
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        url = m.group(1) if m else None
        assert time.monotonic() < deadline, "".join(lines)
    while True:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "server did not become ready"
        time.sleep(0.1)


def stop_server(proc) -> int:
    """SIGTERM and the exit status (killed after 60 s)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
