"""The engine on the bundled SmolLM2-135M (R-A3, R-A5, R-B2): batch composition and speculation never
change greedy output, on the fp32 and the fp16w linear backend (issue 14; `linear_backend` fixture)."""

from __future__ import annotations

import pytest

from adaspec.engine.llm_engine import LLM
from adaspec.sampling_params import SamplingParams

pytestmark = pytest.mark.bundled

PROMPTS = [
    "What is the capital of France?",
    "Write a Python function that returns the square of a number.",
    "Hi",
    "List three colours.",
    "Explain in one sentence why the sky is blue, and mention the name of the scattering effect.",
    "2+2=",
    "Translate 'good morning' into Spanish.",
    "Give me a one-line joke about computers and programmers who forget semicolons at the end.",
]


@pytest.fixture(scope="module")
def llm(linear_backend):
    return LLM(dtype="float32", max_seqs_per_batch=8, linear_backend=linear_backend)


def test_batch_of_8_mixed_prompts_equals_each_alone(llm):
    params = SamplingParams(temperature=0, max_tokens=12)
    batch = llm.generate(PROMPTS, params, chat=True)
    for prompt, out in zip(PROMPTS, batch):
        alone = llm.generate([prompt], params, chat=True)[0]
        assert out.token_ids == alone.token_ids, prompt


def test_chat_answer_is_sensible(llm):
    out = llm.generate(["What is the capital of France?"], SamplingParams(temperature=0, max_tokens=20), chat=True)[0]
    assert "Paris" in out.text and out.finish_reason == "stop"


def test_shipped_mtp_draft_equals_plain_greedy(llm, linear_backend):
    """The real target and the shipped draft, both on the backend: speculative greedy = plain greedy."""
    from adaspec.drafts.factory import shipped_draft_dir

    if not (shipped_draft_dir("mtp") / "model.safetensors").is_file():
        pytest.skip("no shipped MTP draft")
    prompts = PROMPTS[:2]
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    plain = llm.generate(prompts, params, chat=True)
    spec = LLM(dtype="float32", max_seqs_per_batch=2, linear_backend=linear_backend, speculative_algorithm="MTP",
               num_speculative_tokens=3)
    assert spec.engine.linear_backend == linear_backend
    outs = spec.generate(prompts, params, chat=True)
    assert [o.token_ids for o in outs] == [o.token_ids for o in plain]
    assert spec.engine.spec_stats.summary()["acceptance_rate"] > 0
