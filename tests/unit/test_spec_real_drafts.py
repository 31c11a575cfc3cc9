"""The real MTP and DSpark draft classes inside continuous batching are lossless (R-B2, issue 3).

Tiny random target, drafts initialised from it (MTP starts as "predict what the target predicts",
so on the repetitive output of a random model it is often right, exercising acceptance).
MTP k = 1..5 and DSpark w = 5 and 7 (the w = 7 draft also serves w = 5), batches of up to 8 with
staggered arrivals and early finishes: output equals plain greedy output token for token, on the
fp32 and the fp16w linear backend (the draft and its head are packed with the target's backend).
"""

from __future__ import annotations

import pytest
import torch

from adaspec.drafts.factory import build_draft
from adaspec.engine.llm_engine import LLM
from adaspec.models.loader import load_model
from adaspec.sampling_params import SamplingParams
from staggered import run_staggered

PROMPTS = ["Hello there", "a", "The quick brown fox", "1 2 3 4 5 6 7 8", "xyz xyz xyz", "Q?", "long " * 6, "zz"]
MAX_TOKENS = [12, 3, 16, 9, 14, 1, 11, 7]


@pytest.fixture(scope="module")
def plain(tiny_llama_dir, linear_backend):
    llm = LLM(str(tiny_llama_dir), max_seqs_per_batch=8, max_num_batched_tokens=32, linear_backend=linear_backend)
    params = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in MAX_TOKENS]
    return params, [o.token_ids for o in llm.generate(PROMPTS, params)]


def _draft(tiny_llama_dir, kind, width):
    cfg, target = load_model(tiny_llama_dir, torch.float32, "cpu")
    d2t = torch.arange(cfg.vocab_size)
    return build_draft(kind, cfg, d2t, width=width, num_layers=1, rank=8).init_from_target(target).eval()


@pytest.mark.parametrize("algo, kind, width, n", [
    ("MTP", "mtp", 7, 1), ("MTP", "mtp", 7, 2), ("MTP", "mtp", 7, 3), ("MTP", "mtp", 7, 4), ("MTP", "mtp", 7, 5),
    ("DSpark", "dspark", 5, 5), ("DSpark", "dspark", 7, 7), ("DSpark", "dspark", 7, 5),
])
def test_real_drafts_equal_plain_greedy(tiny_llama_dir, plain, linear_backend, algo, kind, width, n):
    params, ref = plain
    draft = _draft(tiny_llama_dir, kind, width)
    llm = LLM(str(tiny_llama_dir), drafter=draft, speculative_algorithm=algo,
              num_speculative_tokens=n, max_seqs_per_batch=8, max_num_batched_tokens=80, linear_backend=linear_backend)
    packed = [m.backend for m in draft.modules() if hasattr(m, "backend")]
    assert (packed and set(packed) == {linear_backend}) if linear_backend != "fp32" else not packed
    # two arrivals every other step
    assert [o.token_ids for o in run_staggered(llm.engine, PROMPTS, params, per_arrival=2)] == ref
    assert llm.engine.spec_stats.drafts > 0
