"""`adaspec serve` on the bundled model, driven by the official `openai` client (issue 9, R-I1, R-B2).

One server subprocess per module, on a free 127.0.0.1 port, with MTP speculation and schedule
overlap on: greedy answers must equal `LLM.generate` (plain, no speculation) token for token.
The load test sends 32 concurrent streaming requests (greedy and temperature 0.8; a third
disconnect after a few chunks), bounded in count and time, and checks that the running-requests
and slots-in-use gauges return to 0.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from serve_process import launch, stop_server, wait_ready

pytestmark = pytest.mark.bundled
openai = pytest.importorskip("openai")

CHAT = ["What is the capital of France?", "Name three primes.", "Write a haiku about the sea.",
        "Give one tip for sleeping better."]
TEXT = ["def fibonacci(n):", "The quick brown fox", "Once upon a time, in a small village,"]
MAX_TOKENS = 12
LOAD_TOKENS = 8  # the load test's outputs: 32 requests, kept short


@pytest.fixture(scope="module")
def stack():
    """The server process (loading while the offline references are computed here) and the references."""
    from adaspec import LLM, SamplingParams

    proc = launch(["--speculative_algorithm=MTP", "--enable_schedule_overlap=true", "--max_seqs_per_batch=16",
                   "--max_model_len=512",  # short chats only: a small KV cache on a shared machine
                   "--served_model_name=smol"])
    try:
        llm = LLM(max_seqs_per_batch=8)
        refs = {}
        for n in (MAX_TOKENS, LOAD_TOKENS):
            p = SamplingParams(temperature=0, max_tokens=n)
            refs[n] = ({q: o for q, o in zip(CHAT, llm.generate(CHAT, p, chat=True))},
                       {q: o for q, o in zip(TEXT, llm.generate(TEXT, p, chat=False))})
        del llm
        _, url = wait_ready(proc)
        yield url, refs
    finally:
        assert stop_server(proc) == 0


@pytest.fixture(scope="module")
def server(stack):
    return stack[0]


@pytest.fixture(scope="module")
def offline(stack):
    return stack[1][MAX_TOKENS]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_chat_and_completions_with_the_openai_client_equal_offline_greedy(client, offline):
    chat_ref, text_ref = offline
    for q in CHAT[:2]:
        r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": q}],
                                           temperature=0, max_tokens=MAX_TOKENS)
        assert r.choices[0].message.content == chat_ref[q].text
        assert r.usage.completion_tokens == len(chat_ref[q].token_ids)
        stream = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": q}],
                                                temperature=0, max_tokens=MAX_TOKENS, stream=True,
                                                stream_options={"include_usage": True})
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == chat_ref[q].text
        assert chunks[-1].usage.completion_tokens == len(chat_ref[q].token_ids)
    for q in TEXT[:2]:
        r = client.completions.create(model="smol", prompt=q, temperature=0, max_tokens=MAX_TOKENS)
        assert r.choices[0].text == text_ref[q].text
        stream = client.completions.create(model="smol", prompt=q, temperature=0, max_tokens=MAX_TOKENS, stream=True)
        assert "".join(c.choices[0].text for c in stream) == text_ref[q].text
    assert [m.id for m in client.models.list()] == ["smol"]


def test_refused_request_gets_400_naming_the_field(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smol", prompt="hi", max_tokens=4, presence_penalty=0.5)  # R-B5
    assert e.value.status_code == 400 and e.value.param == "presence_penalty"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}], top_p=0)
    assert e.value.param == "top_p"
    r = httpx.post(server + "/v1/completions", json={"model": "smol", "prompt": "Hi", "max_tokens": 8, "temperature": 0})
    acc = r.json()["acceptance"]  # per-request acceptance, an extra field
    assert acc["drafts"] >= 1 and 0 <= acc["accepted_tokens"] <= acc["draft_tokens"]


def _metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(f"adaspec:{name} "):
            return float(line.split()[-1])
    raise KeyError(name)


async def _client(c: httpx.AsyncClient, url: str, i: int) -> tuple[int, str, str | None, bool]:
    """One streaming request; every third disconnects after a few chunks."""
    greedy = i % 2 == 0
    q = CHAT[i % len(CHAT)]
    body = {"model": "smol", "messages": [{"role": "user", "content": q}], "max_tokens": LOAD_TOKENS,
            "temperature": 0 if greedy else 0.8, "stream": True}
    text, reason = "", None
    async with c.stream("POST", url + "/v1/chat/completions", json=body) as r:
        n = 0
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[6:])
            assert "error" not in obj, obj
            ch = obj["choices"][0]
            text += ch["delta"].get("content") or ""
            reason = ch["finish_reason"] or reason
            n += 1
            if i % 3 == 2 and n >= 3:
                break  # disconnect mid-stream
        return r.status_code, text, reason, greedy


def test_32_concurrent_streaming_clients_with_disconnects(stack):
    server, refs = stack
    chat_ref, _ = refs[LOAD_TOKENS]

    async def run():
        async with httpx.AsyncClient(timeout=httpx.Timeout(180), limits=httpx.Limits(max_connections=40)) as c:
            return await asyncio.wait_for(asyncio.gather(*(_client(c, server, i) for i in range(32))), 300)

    before = _metric(server, "generation_tokens_total")
    results = asyncio.run(run())
    assert all(status == 200 for status, *_ in results)  # no 5xx (nor anything else)
    completed = 0
    for i, (status, text, reason, greedy) in enumerate(results):
        if i % 3 != 2:
            assert reason in ("stop", "length")
            if greedy:
                assert text == chat_ref[CHAT[i % len(CHAT)]].text, i  # lossless under load (R-B2)
                completed += 1
    assert completed == 11 and _metric(server, "generation_tokens_total") > before
    deadline = time.monotonic() + 10
    while _metric(server, "num_requests_running") or _metric(server, "kv_slots_in_use"):
        assert time.monotonic() < deadline, "gauges did not return to 0"
        time.sleep(0.1)
    assert _metric(server, "num_requests_waiting") == 0
    assert _metric(server, "spec_decode_num_drafts_total") > 0
