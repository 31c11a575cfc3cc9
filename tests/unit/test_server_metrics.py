"""/metrics has vLLM's speculation semantics and honours --metrics_namespace (issue 9 item 5, R-I2).

A server on the tiny model with MTP k = 3 and a replay drafter (the reference continuation with
deterministic corruptions, so rounds accept every count from 0 to k) answers greedy requests. The
scraped counters must agree with the per-request `acceptance` fields summed over the responses,
which come from another code path (the request's own counters):
- `spec_decode_num_drafts_total`: request-rounds that verified >= 1 draft token;
- `spec_decode_num_draft_tokens_total`, `spec_decode_num_accepted_tokens_total` (bonus excluded);
- `spec_decode_num_accepted_tokens_per_pos_total{position=i}`: drafts whose first i+1 tokens were
  accepted, so it falls with i, and sums over positions to the accepted tokens.
"""

from __future__ import annotations

import re

import httpx
import pytest

from adaspec.config import EngineConfig
from adaspec.engine.async_engine import AsyncEngine
from adaspec.engine.llm_engine import LLM, LLMEngine
from adaspec.sampling_params import SamplingParams
from adaspec.server.app import ServerSettings, build_app
from replay_drafter import ReplayDrafter
from server_harness import serving

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CFG = dict(max_seqs_per_batch=4, max_num_batched_tokens=64, max_model_len=96)
PROMPTS = ["The cat sat on", "abc abc", "1 2 3 4", "Hello there"]
NS = "myns"


def _series(text: str, name: str) -> dict[str, float]:
    """label string ('' if none) -> value of every sample of `NS:name`."""
    out = {}
    for m in re.finditer(rf"^{NS}:{name}(\{{[^}}]*\}})? (\S+)$", text, re.M):
        out[m.group(1) or ""] = float(m.group(2))
    return out


def test_speculation_counters_have_vllm_semantics_under_a_custom_namespace(tiny_llama_dir):
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    refs = LLM(str(tiny_llama_dir), **CFG).generate(PROMPTS, params)
    drafter = ReplayDrafter([o.prompt_token_ids + o.token_ids for o in refs], max_steps=3)
    config = EngineConfig(model=str(tiny_llama_dir), speculative_algorithm="MTP", num_speculative_tokens=3, **CFG)
    engine = AsyncEngine(lambda: LLMEngine(config, drafter=drafter))
    app = build_app(engine, ServerSettings("tiny", None, NS))
    with serving(app) as url:
        totals = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0}
        for prompt, ref in zip(PROMPTS, refs):
            body = {"prompt": prompt, "temperature": 0, "max_tokens": 20, "ignore_eos": True}
            r = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
            assert r["choices"][0]["text"] == ref.text  # lossless (R-B2)
            for k in totals:
                totals[k] += r["acceptance"][k]
        text = httpx.get(url + "/metrics", timeout=10).text
    assert "adaspec:" not in text and f"{NS}:spec_decode_num_drafts_total" in text
    drafts = _series(text, "spec_decode_num_drafts_total")[""]
    draft_tokens = _series(text, "spec_decode_num_draft_tokens_total")[""]
    accepted = _series(text, "spec_decode_num_accepted_tokens_total")[""]
    per_pos = {int(re.search(r'position="(\d+)"', k).group(1)): v
               for k, v in _series(text, "spec_decode_num_accepted_tokens_per_pos_total").items()}
    assert (drafts, draft_tokens, accepted) == (totals["drafts"], totals["draft_tokens"], totals["accepted_tokens"])
    assert 0 < accepted < draft_tokens <= 3 * drafts  # the corruptions reject some, k = 3 at most per draft
    positions = [per_pos.get(i, 0.0) for i in range(3)]
    assert positions[0] <= drafts and positions == sorted(positions, reverse=True), positions
    assert sum(positions) == accepted and set(per_pos) <= {0, 1, 2}
    assert _series(text, "request_success_total")['{finished_reason="length"}'] == len(PROMPTS)
    assert _series(text, "generation_tokens_total")[""] == 20 * len(PROMPTS)
