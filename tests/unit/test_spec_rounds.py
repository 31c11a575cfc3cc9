"""Speculative rounds inside continuous batching are lossless (R-B2, R-B3, R-A2, R-A3).

The drafter here is a test double that follows the Drafter protocol: it rebuilds each slot's
committed sequence from the refresh entries (so it also checks that entries arrive in order and
without gaps) and proposes the *reference* greedy continuation with deterministic corruptions,
so rounds accept every count from 0 to k. Speculative output must equal plain greedy output
token for token whatever is accepted, for every k, batch mix and arrival pattern, on the fp32 and
the fp16w linear backend (`linear_backend` fixture, conftest.py; plain and speculative share it).
"""

from __future__ import annotations

import pytest

from adaspec.engine.llm_engine import LLM
from adaspec.sampling_params import SamplingParams
from replay_drafter import ReplayDrafter
from staggered import run_staggered


PROMPTS = ["Hello there", "a", "The quick brown fox jumps", "1 2 3 4 5 6 7 8 9 10 11 12", "xyz xyz", "Q?", "long " * 9]


@pytest.fixture(scope="module")
def plain(tiny_llama_dir, linear_backend):
    llm = LLM(str(tiny_llama_dir), max_seqs_per_batch=4, max_num_batched_tokens=24, linear_backend=linear_backend)
    params = [SamplingParams(temperature=0, max_tokens=6 + 3 * i, ignore_eos=i % 2 == 0) for i in range(len(PROMPTS))]
    outs = llm.generate(PROMPTS, params)
    return params, outs


@pytest.mark.parametrize("host_accept", [True, False], ids=["host-accept", "device-accept"])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_greedy_speculative_equals_plain(tiny_llama_dir, plain, linear_backend, k, host_accept):
    """R-B2: batches of up to 4 with slot reuse, mixed lengths, early stops: same tokens. Both ways of
    laying in draft tokens and counting acceptance (round_runner.py: host lists on CPU, device
    tensors with one read-back elsewhere) are run here on CPU."""
    params, ref = plain
    references = [o.prompt_token_ids + o.token_ids for o in ref]
    drafter = ReplayDrafter(references, max_steps=5)
    llm = LLM(str(tiny_llama_dir), drafter=drafter, speculative_algorithm="MTP", num_speculative_tokens=k,
              max_seqs_per_batch=4, max_num_batched_tokens=24, linear_backend=linear_backend)
    assert llm.engine.linear_backend == linear_backend
    assert llm.engine.rounds.host_accept  # CPU
    llm.engine.rounds.host_accept = host_accept
    outs = llm.generate(PROMPTS, params)
    for o, r in zip(outs, ref):
        assert o.token_ids == r.token_ids
        assert o.finish_reason == r.finish_reason
    stats = llm.engine.spec_stats.summary()
    assert drafter.calls > 0 and stats["drafts"] > 0
    assert 0 < stats["acceptance_rate"] < 1  # both accepted and rejected drafts were exercised


def test_staggered_arrivals_match_plain(tiny_llama_dir, plain, linear_backend):
    """R-A3 + R-B2: requests join while others decode; each result equals its plain output."""
    params, ref = plain
    references = [o.prompt_token_ids + o.token_ids for o in ref]
    llm = LLM(str(tiny_llama_dir), drafter=ReplayDrafter(references, max_steps=4), speculative_algorithm="MTP",
              num_speculative_tokens=4, max_seqs_per_batch=3, max_num_batched_tokens=16, linear_backend=linear_backend)
    done = run_staggered(llm.engine, PROMPTS, params)
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids


def test_speculation_refuses_unsupported_features(tiny_llama_dir):
    """R-B5: an unsupported feature is refused before any work under speculation, and others still run;
    a seeded request is served (its output equals seeded plain output: test_seeded_speculation.py)."""
    from adaspec.engine.llm_engine import RequestError

    llm = LLM(str(tiny_llama_dir), drafter=ReplayDrafter([], max_steps=2), speculative_algorithm="MTP",
              num_speculative_tokens=2)
    assert len(llm.generate(["hi"], SamplingParams(temperature=0.5, seed=3, max_tokens=3))[0].token_ids) >= 1
    with pytest.raises(RequestError, match="logprobs"):
        llm.generate(["hi"], SamplingParams(logprobs=2))
    assert not llm.engine.has_unfinished()
    assert llm.generate(["hi"], SamplingParams(temperature=0, max_tokens=3))[0].finish_reason is not None


def test_host_acceptance_count_equals_the_device_count():
    """round_runner's host count (CPU) is sampling.verify.count_accepted's rule over lists, with prefill
    chunks (one or no sampled row) between the decoding requests."""
    import torch

    from adaspec.sampling.verify import count_accepted_host
    from adaspec.sampling.verify import count_accepted

    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        B, K = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 6, (1,), generator=g))
        drafts = torch.randint(0, 3, (B, K), generator=g)
        lens = torch.randint(0, K + 1, (B,), generator=g).tolist()
        grid = torch.full((B, K + 1), -1, dtype=torch.long)
        y, is_decode, n_sampled = [], [], []
        for b in range(B):
            if trial % 2:  # a prefill chunk before this request: one sampled row or none
                n = int(torch.randint(0, 2, (1,), generator=g))
                y += torch.randint(0, 3, (n,), generator=g).tolist()
                is_decode.append(False), n_sampled.append(n)
            rows = torch.randint(0, 3, (lens[b] + 1,), generator=g)
            grid[b, :lens[b] + 1] = rows
            y += rows.tolist()
            is_decode.append(True), n_sampled.append(lens[b] + 1)
        expected = count_accepted(drafts, grid, torch.tensor(lens)).tolist()
        assert count_accepted_host(drafts.tolist(), y, lens, is_decode, n_sampled) == expected
