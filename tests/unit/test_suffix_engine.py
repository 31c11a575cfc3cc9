"""Suffix and MTP+Suffix drafts end to end: greedy output equals plain greedy in every mode (issue 10, R-B2).

Fixed k, adaptive draft step, adaptive verify sync (w = 5) and async (w = 7, schedule overlap),
schedule overlap with fixed k, the global cache, staggered arrivals and slot reuse (3 slots, 7
requests), on the fp32 and fp16w linear backends. The tiny random target repeats itself, and the
prompts repeat their own tokens, so the Suffix draft proposes, and both accepted and rejected
proposals occur (asserted, so a test that never speculated cannot pass).
"""

from __future__ import annotations

import json

import pytest
import torch

from adaspec.drafts.factory import build_draft
from adaspec.drafts.hybrid import MTPSuffixDrafter
from adaspec.engine.llm_engine import LLM
from adaspec.sampling_params import SamplingParams
from small_calibration import install_cheap_costs
from staggered import run_staggered

PROMPTS = ["1 2 3 4 5 6 7 8 9 10 11 12 1 2 3 4 5", "xyz xyz xyz xyz", "the cat sat on the mat, the cat sat",
           "Hello there", "a b a b a b a", "Q?", "long " * 9]
CAL = {"request_buckets": [1, 2, 3], "contexts": [{"prefill_tokens": 8, "min_kv_length": 1, "max_kv_length": 300}],
       "warmup_steps": 1, "window_steps": 2, "windows_per_point": 1, "token_seed": 3}
COMMON = dict(max_seqs_per_batch=3, max_num_batched_tokens=32, max_model_len=320)


@pytest.fixture(scope="module")
def plain(tiny_llama_dir, linear_backend):
    llm = LLM(str(tiny_llama_dir), linear_backend=linear_backend, **COMMON)
    params = [SamplingParams(temperature=0, max_tokens=12 + 5 * i, ignore_eos=i % 2 == 0) for i in range(len(PROMPTS))]
    return params, llm.generate(PROMPTS, params)


@pytest.fixture(scope="module")
def cal_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("suffix_cal")
    verify, step = d / "verify.json", d / "step.json"
    verify.write_text(json.dumps(CAL))
    step.write_text(json.dumps({"version": 1, "policy": {"window_size": 4, "update_interval": 2}, "calibration": CAL}))
    return verify, step


def tiny_mtp(tiny_llama_dir):
    from adaspec.models.loader import load_model

    cfg, model = load_model(tiny_llama_dir, torch.float32, "cpu")
    d2t = torch.randperm(cfg.vocab_size, generator=torch.Generator().manual_seed(0))[:96]
    return build_draft("mtp", cfg, d2t).init_from_target(model).eval().requires_grad_(False)


MODES = {
    "fixed_k1": dict(num_speculative_tokens=1),
    "fixed_k4": dict(num_speculative_tokens=4),
    "fixed_k3_overlap_global": dict(num_speculative_tokens=3, enable_schedule_overlap=True, suffix_global_cache=4),
    "step": dict(num_speculative_tokens=3, enable_adaptive_draft_step=True),
    "step_overlap": dict(num_speculative_tokens=3, enable_adaptive_draft_step=True, enable_schedule_overlap=True),
    "verify_sync5": dict(num_speculative_tokens=5, enable_adaptive_target_verify=True),
    "verify_async7": dict(num_speculative_tokens=7, enable_adaptive_target_verify=True, enable_schedule_overlap=True),
}


def _flags(mode, cal_files):
    flags = dict(MODES[mode])
    if flags.get("enable_adaptive_draft_step"):
        flags["adaptive_draft_step_config"] = str(cal_files[1])
    elif flags.get("enable_adaptive_target_verify"):
        flags["adaptive_target_verify_calibration"] = str(cal_files[0])
    if flags.get("enable_adaptive_draft_step") or flags.get("enable_adaptive_target_verify"):
        flags["graph_decode_batch_sizes"] = (1, 2, 3)
    return flags


def _check(engine, done, ref, expect_verified=True):
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids, i
        assert done[i].finish_reason == r.finish_reason, i
    if expect_verified:
        assert engine.spec_stats.drafts > 0, "nothing was verified: the test would prove nothing"
        assert engine.spec_stats.accepted_tokens > 0


@pytest.mark.parametrize("mode", sorted(MODES))
def test_suffix_greedy_equals_plain(tiny_llama_dir, plain, linear_backend, cal_files, mode):
    params, ref = plain
    llm = LLM(str(tiny_llama_dir), speculative_algorithm="Suffix", linear_backend=linear_backend,
              **COMMON, **_flags(mode, cal_files))
    install_cheap_costs(llm.engine)  # whether anything gets verified must not depend on CI timing
    done = run_staggered(llm.engine, PROMPTS, params)
    _check(llm.engine, done, ref)
    st = llm.engine.drafter.stats()
    assert st["draft_calls"] > 0
    if MODES[mode].get("enable_adaptive_target_verify"):  # issue 13's plain floor never skips a Suffix draft
        assert llm.engine.control.floor is None
    if MODES[mode].get("enable_adaptive_draft_step"):  # served pricing is MTP's only (adaptive/step_served.py)
        assert llm.engine.control.step.served.last_round is None and llm.engine.control.step.cost_checks == 0
    if MODES[mode].get("suffix_global_cache"):  # finished requests' outputs joined the cache (bounded by N)
        assert st["global_cache_outputs"] == MODES[mode]["suffix_global_cache"]


@pytest.mark.parametrize("mode", ["fixed_k4", "fixed_k3_overlap_global", "step_overlap", "verify_sync5",
                                  "verify_async7"])
def test_mtp_suffix_greedy_equals_plain(tiny_llama_dir, plain, linear_backend, cal_files, mode):
    params, ref = plain
    drafter = MTPSuffixDrafter(tiny_mtp(tiny_llama_dir))
    llm = LLM(str(tiny_llama_dir), drafter=drafter, speculative_algorithm="MTP+Suffix", linear_backend=linear_backend,
              **COMMON, **_flags(mode, cal_files))
    install_cheap_costs(llm.engine)  # with the measured tiny-target table sync admission may verify nothing
    done = run_staggered(llm.engine, PROMPTS, params)
    _check(llm.engine, done, ref)
    st = drafter.stats()
    assert st["suffix_rows"] > 0 and st["mtp_rows"] > 0 and st["draft_calls"] > 0  # both sources proposed


def test_suffix_fixed_rounds_verify_only_what_was_proposed(tiny_llama_dir, plain, linear_backend):
    """A request without a match verifies no rows in a fixed-k round (it costs what plain decoding costs)."""
    params, ref = plain
    llm = LLM(str(tiny_llama_dir), speculative_algorithm="Suffix", num_speculative_tokens=5,
              linear_backend=linear_backend, **COMMON)  # the backend of `plain` (auto may choose another one)
    eng = llm.engine
    seen = []
    eng.round_observers.append(lambda ev: seen.append((ev.result.verify_lens, ev.result.draft_scores)))
    outs = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
    lens = [L for v, _ in seen for L in v]
    assert 0 in lens and 5 in lens
    for v, scores in seen:
        for L, s in zip(v, scores):
            assert L == 0 or min(s[:L]) > 0  # verified rows are real proposals, never filler
