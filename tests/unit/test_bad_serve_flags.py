"""`adaspec serve` and `adaspec bench-serve` refuse bad flags in one line, before any model work or request.

Issue 8 (audit) and issue 9: `--host=` used to listen on every interface, `--shutdown_timeout=nan`
was accepted, `bench-serve --ignore_eos=maybe` meant false, `--temperature=nan` and `--timeout=0`
were sent to the server, and a bad `--json_out` or `--plot` was found only after the whole benchmark
(the results were lost). Every case runs in-process through `refusal.refused` (exit 2, one line
naming the flag, no traceback, no weights loaded, fast); bench-serve cases point at a closed port, so
any case that got past its flags would fail on "cannot read /v1/models" instead.
"""

from __future__ import annotations

import json

import pytest

from refusal import refused

pytest.importorskip("fastapi")

SERVE_CASES = [
    (["--host="], "--host", ["empty"]),
    (["--shutdown_timeout=nan"], "--shutdown_timeout", ["finite"]),
    (["--shutdown_timeout=inf"], "--shutdown_timeout", ["finite"]),
    (["--shutdown_timeout=-1"], "--shutdown_timeout", [">= 0"]),
    (["--port=-1"], "--port", ["0..65535"]), (["--port=99999999999"], "--port", ["0..65535"]),
    (["--port=abc"], "--port", ["integer"]),
    (["--max_queued_requests=-1"], "--max_queued_requests", [">= 0"]),
    (["--api_key="], "--api_key", ["empty"]), (["--served_model_name= "], "--served_model_name", ["empty"]),
    (["--metrics_namespace=a:b"], "--metrics_namespace", ["letters"]),
    (["--metrics_namespace="], "--metrics_namespace", ["letters"]),
    (["--temperature=0.5"], "--temperature", ["unknown flag"]),  # sampling is per request
    (["--port=1", "--port=2"], "--port", ["given twice"]),
    (["--max_seqs_per_batch=0"], "--max_seqs_per_batch", [">= 1"]),
    (["--device=cuda:x"], "--device", ["cuda:N"]),
    (["--api_key= "], "--api_key", ["white space"]), (["--api_key=k "], "--api_key", ["white space"]),  # audit: every
    # request was then a 401 (HTTP strips header values)
]


@pytest.mark.parametrize("flags, name, contains", SERVE_CASES, ids=[f"{c[1]}{i}" for i, c in enumerate(SERVE_CASES)])
def test_bad_serve_flag(flags, name, contains, tiny_llama_dir, capsys, monkeypatch):
    line = refused(["serve", f"--model={tiny_llama_dir}", *flags], capsys, monkeypatch, name, contains=contains)
    assert "listening on" not in line


CLOSED = "--base_url=http://127.0.0.1:9"  # nothing listens there


def bench(*flags):
    given = {f.split("=", 1)[0] for f in flags}
    defaults = [d for d in (CLOSED, "--prompts=chat", "--num_prompts=1", "--progress=false") if d.split("=", 1)[0] not in given]
    return ["bench-serve", *defaults, *flags]


BENCH_CASES = [
    (["--temperature=nan"], "--temperature", ["finite"]),
    (["--temperature=-1"], "--temperature", [">= 0"]),
    (["--ignore_eos=maybe"], "--ignore_eos", ["true or false"]),  # used to mean false
    (["--progress=maybe"], "--progress", ["true or false"]),
    (["--timeout=nan"], "--timeout", ["finite"]), (["--timeout=0"], "--timeout", ["> 0"]),
    (["--timeout=-5"], "--timeout", ["> 0"]),
    (["--request_rate=nan"], "--request_rate", ["> 0"]), (["--request_rate=-1"], "--request_rate", ["> 0"]),
    (["--concurrency="], "--concurrency", [">= 1"]), (["--concurrency=0"], "--concurrency", [">= 1"]),
    (["--num_prompts=0"], "--num_prompts", ["each value must be >= 1"]),  # audit: said "concurrency levels"
    (["--max_tokens=0"], "--max_tokens", [">= 1"]), (["--num_warmups=-1"], "--num_warmups", [">= 0"]),
    (["--num_prompts=1,2", "--concurrency=1,2,3"], "--num_prompts", ["one per --concurrency"]),
    (["--prompts="], "--prompts", ["unknown set"]), (["--endpoint=embeddings"], "--endpoint", ["allowed values"]),
    (["--model="], "--model", ["empty"]), (["--api_key="], "--api_key", ["empty"]),  # used to mean "not given"
    (["--base_url=notaurl"], "--base_url", ["http://"]), (["--metrics_url=localhost:8000"], "--metrics_url", ["http://"]),
    (["--json_out=/nonexistent/out.json"], "--json_out", ["does not exist"]),
    (["--plot=/nonexistent/p.png"], "--plot", ["does not exist"]), (["--plot=p.jpg"], "--plot", [".png"]),
]


@pytest.mark.parametrize("flags, name, contains", BENCH_CASES, ids=[f"{c[1]}{i}" for i, c in enumerate(BENCH_CASES)])
def test_bad_bench_serve_flag(flags, name, contains, capsys, monkeypatch):
    refused(bench(*flags), capsys, monkeypatch, name, contains=contains)


def test_bench_serve_checks_its_outputs_before_sending(tmp_path, capsys, monkeypatch):
    """A results file that is not bench-serve's, or a directory, is refused up front (it used to fail
    with a traceback after the whole run, losing it); a file of earlier runs is accepted and kept."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    refused(bench(f"--json_out={notes}"), capsys, monkeypatch, "--json_out", contains=["invalid JSON"])
    numbers = tmp_path / "numbers.json"
    numbers.write_text("[1, 2]")
    refused(bench(f"--json_out={numbers}"), capsys, monkeypatch, "--json_out", contains=["does not hold bench-serve"])
    refused(bench(f"--json_out={tmp_path}"), capsys, monkeypatch, "--json_out", contains=["is a directory"])
    (tmp_path / "p.png").mkdir()
    refused(bench(f"--plot={tmp_path / 'p.png'}"), capsys, monkeypatch, "--plot", contains=["is a directory"])
    earlier = tmp_path / "runs.json"
    earlier.write_text(json.dumps([{"label": "old"}]))
    refused(bench(f"--json_out={earlier}"), capsys, monkeypatch, "--base_url", contains=["cannot read /v1/models"])
    assert notes.read_text() == "my notes" and json.loads(earlier.read_text()) == [{"label": "old"}]


def test_a_port_in_use_is_one_line_before_the_model_loads(tiny_llama_dir, capsys, monkeypatch):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        refused(["serve", f"--model={tiny_llama_dir}", f"--port={port}"], capsys, monkeypatch, f"--port={port}",
                contains=["Address already in use", "--port=0"])
