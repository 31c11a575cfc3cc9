"""`adaspec serve --tp_size=2` and `--dp_size=2` on the bundled model, driven by the `openai` client
(issue 12): chat and completions, streamed and not, equal offline greedy of the same topology
(TP=2 can differ from TP=1 where the changed reduction order flips a near-tie, so the reference
is computed with the same --tp_size / --dp_size); SIGTERM stops every rank with exit status 0.
"""

from __future__ import annotations

import pytest
from serve_process import launch, stop_server, wait_ready

pytestmark = pytest.mark.bundled
openai = pytest.importorskip("openai")

CHAT = ["What is the capital of France?", "Name three primes."]
TEXT = ["def fibonacci(n):", "The quick brown fox"]
MAX_TOKENS = 10


@pytest.mark.parametrize("topology", [["--tp_size=2"], ["--dp_size=2"]], ids=["tp2", "dp2"])
def test_openai_client_on_a_parallel_server_equals_offline_greedy(topology):
    from adaspec import LLM, SamplingParams

    proc = launch(["--speculative_algorithm=MTP", "--max_seqs_per_batch=4", "--max_model_len=512",
                   "--served_model_name=smol", *topology])
    try:
        key, value = topology[0].lstrip("-").split("=")
        llm = LLM(max_seqs_per_batch=4, max_model_len=512, **{key: int(value)})
        p = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
        chat_ref = {q: o.text for q, o in zip(CHAT, llm.generate(CHAT, p, chat=True))}
        text_ref = {q: o.text for q, o in zip(TEXT, llm.generate(TEXT, p, chat=False))}
        llm.close()
        _, url = wait_ready(proc)
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        for q in CHAT:
            r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": q}],
                                               temperature=0, max_tokens=MAX_TOKENS)
            assert r.choices[0].message.content == chat_ref[q]
            stream = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": q}],
                                                    temperature=0, max_tokens=MAX_TOKENS, stream=True)
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == chat_ref[q]
        for q in TEXT:
            r = client.completions.create(model="smol", prompt=q, temperature=0, max_tokens=MAX_TOKENS)
            assert r.choices[0].text == text_ref[q]
        with pytest.raises(openai.BadRequestError) as e:  # a refusal on rank 0, before any shard works
            client.completions.create(model="smol", prompt="hi", max_tokens=4, presence_penalty=0.5)
        assert e.value.param == "presence_penalty"
    finally:
        assert stop_server(proc) == 0
