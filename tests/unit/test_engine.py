"""Continuous batching and stopping in the engine (R-A3, R-I1).

Greedy outputs must not depend on batch composition: a request gives the same tokens alone, in a
batch, when it arrives late, when its prompt is prefilled in chunks, or when its slot was used
before by another request.
"""

from __future__ import annotations

import pytest

from adaspec.config import ConfigError, EngineConfig
from adaspec.engine.llm_engine import LLM, RequestError
from adaspec.engine.scheduler import Scheduler
from adaspec.engine.request import Request
from adaspec.sampling_params import SamplingParams
from staggered import run_staggered

PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog " * 3, "a b c", "x" * 40, "What now?", "1+1=", "zz", "end"]
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(tiny_llama_dir):
    return LLM(str(tiny_llama_dir), max_seqs_per_batch=3, max_num_batched_tokens=16)


@pytest.fixture(scope="module")
def alone(llm):
    return [llm.generate([p], GREEDY)[0].token_ids for p in PROMPTS]


def test_batch_equals_alone_with_chunked_prefill_and_slot_reuse(llm, alone):
    """8 prompts, 3 slots, 16-row budget: long prompts are chunked, slots are reused 5 times."""
    outs = llm.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in outs] == alone
    assert all(len(o.token_ids) == 8 and o.finish_reason == "length" for o in outs)


def test_staggered_arrivals_and_early_finishes(llm, alone):
    eng = llm.engine
    max_tokens = [3, 8, 1, 5, 8, 2, 7, 4]
    params = [GREEDY.model_copy(update={"max_tokens": m}) for m in max_tokens]
    done = run_staggered(eng, PROMPTS, params, every=3)
    for i in range(len(PROMPTS)):
        assert done[i].token_ids == alone[i][: max_tokens[i]]
    assert sorted(eng.scheduler.free_slots) == [0, 1, 2]  # every slot came back


def test_stop_token_ids_and_stop_strings(llm, alone):
    target = alone[0]
    out = llm.generate([PROMPTS[0]], GREEDY.model_copy(update={"stop_token_ids": [target[2]]}))[0]
    assert out.token_ids == target[: target.index(target[2]) + 1] and out.finish_reason == "stop"
    full = llm.generate([PROMPTS[0]], GREEDY)[0].text
    stop = full[3:5]
    out = llm.generate([PROMPTS[0]], GREEDY.model_copy(update={"stop": [stop]}))[0]
    assert out.finish_reason == "stop" and out.text == full[: full.index(stop)]


def test_eos_finishes_unless_ignored(tiny_llama_dir, alone, monkeypatch):
    llm = LLM(str(tiny_llama_dir))
    # declare the 3rd greedy token of prompt 0 an end-of-sequence token
    eos = alone[0][2]
    monkeypatch.setattr(llm.tokenizer, "eos_token_ids", frozenset({eos}))
    out = llm.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=8))[0]
    assert out.finish_reason == "stop" and out.token_ids == alone[0][: alone[0].index(eos) + 1]
    out = llm.generate([PROMPTS[0]], GREEDY)[0]
    assert out.finish_reason == "length" and out.token_ids == alone[0]


def test_context_limit_finishes_with_length(tiny_llama_dir):
    llm = LLM(str(tiny_llama_dir), max_model_len=20)
    out = llm.generate(["abcdefghij"], SamplingParams(temperature=0, max_tokens=100, ignore_eos=True))[0]
    assert out.finish_reason == "length"
    assert len(out.prompt_token_ids) + len(out.token_ids) == 20
    with pytest.raises(RequestError, match="prompt"):
        llm.generate(["x" * 30], GREEDY)


def test_bad_requests_are_refused_and_nothing_is_queued(llm):
    with pytest.raises(RequestError, match="logit_bias"):
        llm.generate(["ok", "ok"], [GREEDY, SamplingParams(logit_bias={1: 2.0})])
    assert not llm.engine.has_unfinished()
    with pytest.raises(RequestError, match="vocabulary"):
        llm.generate([[1, 2, 10**6]], GREEDY)
    assert llm.generate(["ok"], GREEDY)[0].finish_reason == "length"


def test_seeded_random_requests_are_reproducible_in_any_batch(llm):
    p = SamplingParams(temperature=1.0, top_k=20, max_tokens=6, seed=7)
    a = llm.generate(["Hello"], p)[0].token_ids
    b = llm.generate(["x", "Hello", "y"], [GREEDY, p, GREEDY])[1].token_ids
    assert a == b


def test_scheduler_budget_and_slots():
    s = Scheduler(num_slots=2, max_num_batched_tokens=8)
    reqs = [Request(f"r{i}", None, list(range(1, 7)), GREEDY) for i in range(3)]
    for r in reqs:
        s.add(r)
    batch = s.schedule()
    # 6 + 2 rows: r0 whole, r1 its first 2 tokens, r2 waits for a slot
    assert [(c.request.request_id, c.start, len(c.token_ids), c.sample) for c in batch.chunks] == [
        ("r0", 0, 6, True), ("r1", 0, 2, False)]
    assert [r.slot for r in reqs[:2]] == [0, 1] and reqs[2].slot is None


def test_config_errors_name_the_flag():
    with pytest.raises(ConfigError, match="--dtype"):
        EngineConfig(dtype="fp8").validate()
    with pytest.raises(ConfigError, match="--max_num_batched_tokens"):
        EngineConfig(max_seqs_per_batch=32, max_num_batched_tokens=16).validate()
    with pytest.raises(ConfigError, match="--enable_probabilistic_draft"):
        EngineConfig(speculative_algorithm="MTP", enable_probabilistic_draft=True).validate()
    with pytest.raises(ConfigError, match="--speculative_algorithm"):
        EngineConfig(speculative_algorithm="eagle").validate()
    with pytest.raises(ConfigError, match="width must be 5 or 7"):
        EngineConfig(speculative_algorithm="DSpark", num_speculative_tokens=4).validate()
