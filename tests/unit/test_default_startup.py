"""Start-up with the built-in calibration defaults (R-F3: no calibration file), end to end (issue 13).

Every other engine test hands the adaptive modes a small explicit calibration. The defaults differ in kind:
context ranges up to the context limit, prefills of ~1200 tokens forked into every slot, every prepared
request bucket. From 12-04 to stop 38 that start-up crashed (`KeyError: 'req-0'`: a calibration prompt longer
than the runner's max_pending handed over every refresh entry, and the next draft had none) and no test saw
it. Here a tiny target with a 2048-token context runs the whole default start-up (~10 s on one core) and then
serves: greedy output equal to the plain engine's, a cost table installed.
"""

from __future__ import annotations

import pytest
import torch

from adaspec.engine.llm_engine import LLM
from adaspec.sampling_params import SamplingParams

PROMPTS = ["Hello there", "The quick brown fox jumps over", "1 2 3 4 5"]


@pytest.fixture(scope="module")
def long_context_target(tmp_path_factory, save_tiny_hf_dir):
    from transformers import LlamaForCausalLM

    from conftest import randomise_, tiny_llama_config

    torch.manual_seed(0)
    model = randomise_(LlamaForCausalLM(tiny_llama_config(max_position_embeddings=4096)).eval(), seed=1234)
    return save_tiny_hf_dir(model, tmp_path_factory.mktemp("tiny_llama_4k"))


@pytest.fixture(scope="module")
def dspark7(long_context_target, tmp_path_factory):
    from adaspec.drafts.factory import build_draft, save_draft
    from adaspec.models.loader import load_model, weights_fingerprint

    cfg, target = load_model(long_context_target, torch.float32, "cpu")
    draft = build_draft("dspark", cfg, torch.arange(cfg.vocab_size), width=7, num_layers=1, rank=8)
    return save_draft(draft.init_from_target(target), tmp_path_factory.mktemp("dspark7"),
                      weights_fingerprint(long_context_target))


def test_default_calibration_start_up_serves_exactly(long_context_target, dspark7, capsys):
    """Issue 13's done-when command on a tiny target: DSpark w = 7, adaptive verify, no calibration file."""
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    ref = LLM(str(long_context_target), max_model_len=2048).generate(PROMPTS, params)
    llm = LLM(str(long_context_target), speculative_algorithm="DSpark", num_speculative_tokens=7,
              draft_model=str(dspark7), enable_adaptive_target_verify=True, max_model_len=2048)
    log = capsys.readouterr().err
    assert "calibration:" in log and "held-out cost error" in log  # the defaults ran (no table file)
    assert llm.engine.control.table is not None
    out = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in out] == [o.token_ids for o in ref]
