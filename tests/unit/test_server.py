"""The HTTP server on the tiny model, in-process on 127.0.0.1 (issue 9; R-I1, R-I2, R-B5, R-E3).

One server per module (plain tiny Llama, context 64 so every request is short); apps that need
another configuration (API key, gated start-up, queue limit, unified graph) build their own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading

import httpx
import pytest

from adaspec.config import EngineConfig
from adaspec.engine.async_engine import AsyncEngine
from adaspec.engine.llm_engine import LLM, LLMEngine
from adaspec.sampling_params import SamplingParams
from adaspec.server.app import ServerSettings, build_app
from replay_drafter import ReplayDrafter
from server_harness import gauge, serving, wait_until

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CFG = dict(max_seqs_per_batch=4, max_num_batched_tokens=64, max_model_len=64)
NAME = "tiny"


def _app(tiny_llama_dir, build=None, api_key=None, max_queued=None, **cfg):
    config = EngineConfig(model=str(tiny_llama_dir), **{**CFG, **cfg})
    engine = AsyncEngine(build or (lambda: LLMEngine(config)), max_queued_requests=max_queued)
    return build_app(engine, ServerSettings(NAME, api_key)), engine


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    app, engine = _app(tiny_llama_dir)
    with serving(app) as url:
        yield url, engine


@pytest.fixture(scope="module")
def offline(tiny_llama_dir):
    return LLM(str(tiny_llama_dir), **CFG)


def _post(url, path, body, timeout=60, headers=None, **kw):
    # json.dumps escapes non-ASCII (httpx's json= would fail on a lone surrogate before sending it)
    return httpx.post(url + path, content=json.dumps(body), timeout=timeout,
                      headers={"content-type": "application/json", **(headers or {})}, **kw)


def _stream_text(url, path, body) -> tuple[str, list[dict]]:
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    pieces = [c["choices"][0].get("text") or c["choices"][0].get("delta", {}).get("content") or ""
              for c in chunks if c.get("choices")]
    return "".join(pieces), chunks


def test_models_version_health(server):
    url, _ = server
    assert httpx.get(url + "/health").json() == {"status": "ready"}
    assert httpx.get(url + "/v1/models").json()["data"][0]["id"] == NAME
    version = httpx.get(url + "/version").json()
    assert version["version"] and version["linear_backend"] in ("fp32", "fp16w", "bf16")  # issue 14
    assert version["layer_kernels"] in ("native", "torch")


@pytest.mark.parametrize("chat", [False, True])
def test_greedy_equals_offline_streaming_and_not(server, offline, chat):
    url, _ = server
    prompt, params = "The cat sat on", SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    ref = offline.generate([prompt], params, chat=chat)[0]
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {"model": NAME, "temperature": 0, "max_tokens": 20, "ignore_eos": True}
    body.update({"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt})
    full = _post(url, path, body).json()
    choice = full["choices"][0]
    assert (choice["message"]["content"] if chat else choice["text"]) == ref.text
    assert choice["finish_reason"] == "length"
    assert full["usage"] == {"prompt_tokens": len(ref.prompt_token_ids), "completion_tokens": 20,
                             "total_tokens": len(ref.prompt_token_ids) + 20}
    assert full["acceptance"]["drafts"] == 0  # the extra field: no speculation on this server
    text, chunks = _stream_text(url, path, {**body, "stream_options": {"include_usage": True}})
    assert text == ref.text
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 20
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    if chat:
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_stop_string_is_cut_from_the_stream_too(server, offline):
    url, _ = server
    ref = offline.generate(["abc"], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))[0].text
    stop = ref[5:8]
    body = {"prompt": "abc", "temperature": 0, "max_tokens": 30, "ignore_eos": True, "stop": [stop]}
    full = _post(url, "/v1/completions", body).json()["choices"][0]
    assert full["finish_reason"] == "stop" and full["text"] == ref[: ref.index(stop)]
    assert _stream_text(url, "/v1/completions", body)[0] == full["text"]


def _slow_rounds(engine, seconds: float):
    inner = engine.engine.rounds.run

    def slow(chunks, plan):
        threading.Event().wait(seconds)
        return inner(chunks, plan)

    engine.engine.rounds.run = slow
    return lambda: setattr(engine.engine.rounds, "run", inner)


def test_client_disconnect_aborts_and_frees_the_slot(server):
    url, engine = server
    restore = _slow_rounds(engine, 0.05)
    try:
        with httpx.stream("POST", url + "/v1/completions", timeout=60,
                          json={"prompt": "ab", "max_tokens": 60, "ignore_eos": True, "stream": True}) as r:
            lines = r.iter_lines()  # (dropping this iterator would close the connection already)
            assert [next(lines).startswith("data: ") for _ in range(4)] == [True, False, True, False]
            assert gauge(url, "num_requests_running") == 1
        assert wait_until(lambda: gauge(url, "kv_slots_in_use") == 0, timeout=2.0)  # long before 60 x 50 ms
        with pytest.raises(httpx.ReadTimeout):  # non-streaming: the client gives up after 0.3 s
            _post(url, "/v1/completions", {"prompt": "ab", "max_tokens": 60, "ignore_eos": True}, timeout=0.3)
        assert wait_until(lambda: gauge(url, "num_requests_running") == 0, timeout=2.0)
    finally:
        restore()
    assert 'finished_reason="abort"} 2.0' in httpx.get(url + "/metrics").text


def test_a_failing_round_fails_its_requests_with_500_and_serving_goes_on(server, caplog):
    url, engine = server
    inner = engine.engine.rounds.run

    def faulty(chunks, plan):
        if any("FAULT" in (c.request.prompt or "") for c in chunks):
            raise RuntimeError("injected fault")
        return inner(chunks, plan)

    engine.engine.rounds.run = faulty
    try:
        with caplog.at_level(logging.ERROR, logger="adaspec.engine"):
            r = _post(url, "/v1/completions", {"prompt": "FAULT here", "max_tokens": 5})
            assert r.status_code == 500
            assert "injected fault" in r.json()["error"]["message"] and r.json()["error"]["type"] == "internal_server_error"
            text, chunks = _stream_text(url, "/v1/completions", {"prompt": "FAULT again", "max_tokens": 5})
            assert "injected fault" in chunks[-1]["error"]["message"]
        assert "Traceback" in caplog.text and "RuntimeError: injected fault" in caplog.text
        ok = _post(url, "/v1/completions", {"prompt": "fine", "max_tokens": 5})
        assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] in ("length", "stop")
    finally:
        engine.engine.rounds.run = inner
    assert wait_until(lambda: gauge(url, "kv_slots_in_use") == 0)


def test_metrics_names(server):
    url, _ = server
    text = httpx.get(url + "/metrics").text
    for name in ("request_success_total", "prompt_tokens_total", "generation_tokens_total", "num_requests_running",
                 "num_requests_waiting", "kv_slots_in_use", "time_to_first_token_seconds_bucket",
                 "request_time_per_output_token_seconds_bucket", "inter_token_latency_seconds_bucket",
                 "e2e_request_latency_seconds_bucket", "spec_decode_num_drafts_total",
                 "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total",
                 "adaptive_chosen_k_bucket", "adaptive_chosen_target_rows_bucket", "verified_rows_per_request_bucket",
                 "confidence_expected_accepted_tokens_total", "round_predicted_seconds_total",
                 "round_measured_seconds_total", "round_cost_ratio_bucket"):
        assert f"adaspec:{name}" in text, name
    assert "process_cpu_seconds_total" in text


def test_health_is_503_until_ready_and_api_key_is_enforced(tiny_llama_dir):
    gate = threading.Event()
    config = EngineConfig(model=str(tiny_llama_dir), **CFG)

    def build():
        gate.wait(30)
        return LLMEngine(config)

    app, engine = _app(tiny_llama_dir, build=build, api_key="s3cret")
    with serving(app, wait_ready=False) as url:
        assert httpx.get(url + "/health").status_code == 503
        auth = {"Authorization": "Bearer s3cret"}
        r = _post(url, "/v1/completions", {"prompt": "hi"}, headers=auth)
        assert r.status_code == 503 and "starting" in r.json()["error"]["message"]
        gate.set()
        assert wait_until(lambda: httpx.get(url + "/health").status_code == 200, timeout=30)
        assert _post(url, "/v1/completions", {"prompt": "hi", "max_tokens": 2}).status_code == 401
        bad = _post(url, "/v1/completions", {"prompt": "hi", "max_tokens": 2}, headers={"Authorization": "Bearer no"})
        assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_api_key"
        assert _post(url, "/v1/completions", {"prompt": "hi", "max_tokens": 2}, headers=auth).status_code == 200
        assert httpx.get(url + "/metrics").status_code == 200  # probes and scrapers need no key


def test_queue_limit_answers_429(tiny_llama_dir):
    app, engine = _app(tiny_llama_dir, max_queued=1, max_seqs_per_batch=1, max_num_batched_tokens=64)
    with serving(app) as url:
        restore = _slow_rounds(engine, 0.05)

        async def go():
            async with httpx.AsyncClient(timeout=60) as c:
                body = {"prompt": "ab", "max_tokens": 20, "ignore_eos": True}
                first = asyncio.create_task(c.post(url + "/v1/completions", json=body))
                await asyncio.sleep(0.3)
                second = asyncio.create_task(c.post(url + "/v1/completions", json=body))
                await asyncio.sleep(0.3)
                third = await c.post(url + "/v1/completions", json=body)
                return (await first).status_code, (await second).status_code, third

        try:
            a, b, third = asyncio.run(go())
        finally:
            restore()
        assert (a, b, third.status_code) == (200, 200, 429)
        assert third.json()["error"]["type"] == "rate_limit_error"


def test_temperature_is_refused_under_the_unified_graph(tiny_llama_dir):
    config = EngineConfig(model=str(tiny_llama_dir), speculative_algorithm="MTP", num_speculative_tokens=3,
                          enable_unified_mtp_graph=True, **CFG)
    app, _ = _app(tiny_llama_dir, build=lambda: LLMEngine(config, drafter=ReplayDrafter([], max_steps=3)))
    with serving(app) as url:
        r = _post(url, "/v1/completions", {"prompt": "hi", "temperature": 0.8, "max_tokens": 3})
        assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
        assert "enable_unified_mtp_graph" in r.json()["error"]["message"]  # R-E3: refused, never made greedy
        assert _post(url, "/v1/completions", {"prompt": "hi", "temperature": 0, "max_tokens": 3}).status_code == 200


def test_schemathesis_finds_no_server_error(server):
    """Property-based requests from the OpenAPI schema (bounded): none may get a 5xx."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings

    url, _ = server
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    seen = []
    for result in schema.get_all_operations():
        op = result.ok()

        @settings(max_examples=25, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck), derandomize=True)
        @given(case=op.as_strategy())
        def check(case):
            response = case.call(base_url=url, timeout=30)
            seen.append((case.path, response.status_code))
            assert response.status_code < 500, (case.path, case.body, response.text)

        check()
    for path in ("/v1/completions", "/v1/chat/completions"):
        codes = [code for p, code in seen if p == path]
        assert len(codes) >= 20 and 200 in codes and 400 in codes, (path, codes)
