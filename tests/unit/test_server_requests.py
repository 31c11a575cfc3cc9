"""Requests the server refuses with HTTP 400 naming the field, before execution (issue 9 item 3; R-B5, R-I1).

An OpenAI error body (`{"error": {"message", "type", "param", "code"}}`) whose `param` and message
name the field: ranges, features adaspec does not implement, values pydantic's lax mode would
convert (`true`, `"5"`, `2.0` for integers), aliased seeds, text that cannot be tokenised, bodies
that are not JSON objects, a `max_tokens` that cannot fit after the prompt. Split from
test_server.py; one tiny-model server per module (context 64).
"""

from __future__ import annotations

import json

import httpx
import pytest

from adaspec.config import EngineConfig
from adaspec.engine.async_engine import AsyncEngine
from adaspec.engine.llm_engine import LLMEngine
from adaspec.server.app import ServerSettings, build_app
from server_harness import serving

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CFG = dict(max_seqs_per_batch=4, max_num_batched_tokens=64, max_model_len=64)


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    config = EngineConfig(model=str(tiny_llama_dir), **CFG)
    with serving(build_app(AsyncEngine(lambda: LLMEngine(config)), ServerSettings("tiny"))) as url:
        yield url, None


def _post(url, path, body, timeout=60):
    # json.dumps escapes non-ASCII (httpx's json= would fail on a lone surrogate before sending it)
    return httpx.post(url + path, content=json.dumps(body), timeout=timeout, headers={"content-type": "application/json"})


REFUSALS = [  # (body change, param) -- R-B5, R-I1 ranges, OpenAI features adaspec does not implement
    ({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"),
    ({"top_k": -2}, "top_k"), ({"min_p": 2}, "min_p"), ({"max_tokens": 0}, "max_tokens"), ({"n": 2}, "n"),
    ({"logprobs": 1}, "logprobs"), ({"min_tokens": 3}, "min_tokens"), ({"logit_bias": {"5": 1.0}}, "logit_bias"),
    ({"presence_penalty": 0.5}, "presence_penalty"), ({"frequency_penalty": 0.1}, "frequency_penalty"),
    ({"repetition_penalty": 1.2}, "repetition_penalty"), ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"guided_regex": "a+"}, "guided_regex"), ({"model": "gpt-4"}, "model"),
    ({"prompt": "x" * 100}, "prompt"), ({"prompt": ["a", "b"]}, "prompt"), ({"echo": True}, "echo"),
    ({"best_of": 3}, "best_of"), ({"temperature": "hot"}, "temperature"), ({"frobnicate": 1}, "frobnicate"),
    ({"stream_options": {"include_usage": True}}, "stream_options"), ({"prompt": [100000]}, "prompt"),
    # audit (issue 8/9): values pydantic's lax mode converted, aliased seeds, text that cannot be tokenised
    ({"max_tokens": True}, "max_tokens"), ({"max_tokens": "5"}, "max_tokens"), ({"max_tokens": 2.0}, "max_tokens"),
    ({"max_tokens": 100}, "max_tokens"),  # more than fits after the prompt: 400, as vLLM, not a silent cut
    ({"top_k": 1.5}, "top_k"), ({"temperature": True}, "temperature"), ({"seed": -1}, "seed"), ({"seed": 2**70}, "seed"),
    ({"stream": "yes"}, "stream"), ({"ignore_eos": 1}, "ignore_eos"), ({"echo": "false"}, "echo"),
    ({"prompt": [True, 5]}, "prompt"), ({"prompt": [1, "a"]}, "prompt"), ({"prompt": "\ud800"}, "prompt"),
    ({"stop": ["\ud800"]}, "stop"),
    ({"stream": True, "stream_options": {"continuous_usage_stats": True}}, "stream_options.continuous_usage_stats"),
    ({"stream": True, "stream_options": {"include_usage": "maybe"}}, "stream_options.include_usage"),
    ({"stop_token_ids": [True]}, "stop_token_ids"), ({"stop_token_ids": [1.0]}, "stop_token_ids"),  # were read as 1
]


@pytest.mark.parametrize("change,param", REFUSALS, ids=[p for _, p in REFUSALS])
def test_bad_completion_requests_get_400_naming_the_field(server, change, param):
    url, _ = server
    r = _post(url, "/v1/completions", {"prompt": "hi", "max_tokens": 4, **change})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and param.split("[")[0] in err["message"]


@pytest.mark.parametrize("change,param", [({"top_logprobs": 2}, "top_logprobs"), ({"logprobs": True}, "logprobs"),
                                          ({"tools": [{"type": "function"}]}, "tools"), ({"messages": []}, "messages"),
                                          ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
                                          ({"messages": [{"role": "user", "content": "y" * 80}]}, "messages"),
                                          ({"messages": [{"role": "user", "content": "hi", "name": "bob"}]},
                                           "messages[0].name"),  # the template has no names: not ignored
                                          ({"messages": [{"role": "user", "content": "\udfff"}]}, "messages[0].content"),
                                          ({"add_generation_prompt": 1}, "add_generation_prompt"),
                                          ({"max_completion_tokens": 2.5}, "max_completion_tokens"),
                                          ({"max_completion_tokens": 0}, "max_completion_tokens"),
                                          ({"max_tokens": None, "max_completion_tokens": 500}, "max_completion_tokens"),
                                          ({"max_tokens": 500}, "max_tokens")])
def test_bad_chat_requests_get_400_naming_the_field(server, change, param):
    url, _ = server
    r = _post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **change})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_malformed_json_is_a_400(server):
    url, _ = server
    r = httpx.post(url + "/v1/completions", content=b'{"prompt": "x",', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]


@pytest.mark.parametrize("content, ctype, text", [(b"", "application/json", "body is empty"),
                                                  (b"[]", "application/json", "must be a JSON object"),
                                                  (b"null", "application/json", "must be a JSON object"),
                                                  (b'{"prompt": "hi"}', "text/plain", "Content-Type: application/json")])
def test_a_body_that_is_not_a_json_object_is_a_400_saying_so(server, content, ctype, text):
    url, _ = server
    r = httpx.post(url + "/v1/completions", content=content, headers={"content-type": ctype})
    assert r.status_code == 400 and text in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("content, param, text", [
    (b'{"prompt": "hi", "max_tokens": 2, "max_tokens": 3}', "max_tokens", "appears twice"),  # was: the last kept
    (b'{"prompt": "a\xffb", "max_tokens": 2}', None, "not UTF-8"),  # was: "There was an error parsing the body"
    (b'{"prompt": "hi", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", None, "too deeply"),
    (b'{"prompt": "hi", "max_tokens": 1' + b"0" * 5000 + b"}", None, "digits")])
def test_a_body_that_is_not_strict_utf8_json_is_a_400_saying_why(server, content, param, text):
    """Audit (bad inputs; R-I1): a key named twice is refused as in every JSON file adaspec reads, and
    the other bodies Python's parser rejects say why; the server goes on serving."""
    url, _ = server
    r = httpx.post(url + "/v1/completions", content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400 and text in r.json()["error"]["message"], r.text
    assert r.json()["error"]["param"] == param
    assert _post(url, "/v1/completions", {"prompt": "hi", "max_tokens": 2}).status_code == 200


def test_default_max_tokens_of_completions_is_lowered_to_what_fits(server):
    """The completions default (16) is cut to the room after the prompt; an explicit value is refused above."""
    url, _ = server
    r = _post(url, "/v1/completions", {"prompt": "x" * 60, "ignore_eos": True})  # 61 tokens of a 64-token context
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text
