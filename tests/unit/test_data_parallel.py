"""Data parallel on torch.distributed (issue 12, R-H1, R-E2, R-E3, R-G3): 2 processes, gloo, tiny target.

- requests run on both shards and greedy output equals one process's;
- every round both shards take part in one agreement and see the same common (steps, bucket,
  rows), checked from both sides; with DSpark adaptive verify the budget is the common one;
- calibration at DP=2 builds each bucket's synthetic requests on every shard (bucket 4: 4 + 4);
- topology refusals: a DP=1 cost table at DP=2, DP=2 with the unified graph, DP=2 with adaptive
  draft step or MTP adaptive verify.
"""

from __future__ import annotations


import pytest

from adaspec.config import ConfigError
from adaspec.engine.llm_engine import LLM
from adaspec.errors import UserError
from replay_drafter import ReplayDrafter

from parallel_common import COMMON, PROMPTS, params
from small_calibration import calibration_files



@pytest.fixture(scope="module")
def single(tiny_llama_dir):
    llm = LLM(str(tiny_llama_dir), **COMMON)
    return [o.token_ids for o in llm.generate(PROMPTS, params())], llm.tokenizer


def check_agreement(reports):
    """Both sides saw the same common value every round, and it is the maximum of the proposals."""
    a, b = reports[0]["history"], reports[1]["history"]
    assert len(a) == len(b) and a
    for (pa, ca), (pb, cb) in zip(a, b):
        assert ca == cb == tuple(max(x, y) for x, y in zip(pa, pb))


def test_dp2_serves_on_both_shards_with_one_common_bucket_per_round(tiny_llama_dir, single):
    ref, _ = single
    llm = LLM(str(tiny_llama_dir), dp_size=2, **COMMON)
    try:
        out = [o.token_ids for o in llm.generate(PROMPTS, params())]
        reports = llm.engine.report()
    finally:
        llm.close()
    assert out == ref
    assert [r["requests_served"] for r in reports] == [3, 3]
    check_agreement(reports)


def test_dp2_dspark_adaptive_verify_agrees_on_the_budget(tiny_llama_dir, single, tmp_path):
    ref, tok = single
    cal, _ = calibration_files(tmp_path)
    refs = [tok.encode(p) + o for p, o in zip(PROMPTS, ref)]
    llm = LLM(str(tiny_llama_dir), dp_size=2, speculative_algorithm="DSpark", num_speculative_tokens=7,
              enable_adaptive_target_verify=True, enable_schedule_overlap=True, graph_decode_batch_sizes=(1, 2, 4),
              adaptive_target_verify_calibration=str(cal), drafter=ReplayDrafter(refs, max_steps=7), **COMMON)
    try:
        out = [o.token_ids for o in llm.generate(PROMPTS, params())]
        reports = llm.engine.report()
    finally:
        llm.close()
    assert out == ref  # lossless on every shard
    check_agreement(reports)
    assert any(common[0] > 0 for _, common in reports[0]["history"])  # rounds that drafted
    # calibration request buckets are per shard: bucket 4 built 4 synthetic requests on each (8 in all)
    for r in reports:
        assert r["synthetic_requests"] == {1: 1, 2: 2, 4: 4}


def test_a_dp1_cost_table_is_refused_at_dp2(tiny_llama_dir, tmp_path):
    cal, _ = calibration_files(tmp_path)
    table = tmp_path / "table.json"
    flags = dict(speculative_algorithm="DSpark", num_speculative_tokens=7, enable_adaptive_target_verify=True,
                 graph_decode_batch_sizes=(1, 2, 4), drafter=ReplayDrafter([[1, 2]], max_steps=7), **COMMON)
    LLM(str(tiny_llama_dir), adaptive_target_verify_calibration=str(cal),
        adaptive_target_verify_cost_table_output=str(table), **flags)
    with pytest.raises(UserError, match="DP=1 table cannot serve DP=2"):
        LLM(str(tiny_llama_dir), dp_size=2, adaptive_target_verify_cost_table=str(table), **flags)


@pytest.mark.parametrize("flags, match", [
    (dict(dp_size=2, speculative_algorithm="DSpark", num_speculative_tokens=7, enable_adaptive_target_verify=True,
          enable_unified_mtp_graph=True), "--dp_size"),
    (dict(dp_size=2, speculative_algorithm="MTP", num_speculative_tokens=3, enable_adaptive_draft_step=True),
     "requires --dp_size=1"),
    (dict(dp_size=2, speculative_algorithm="MTP", num_speculative_tokens=5, enable_adaptive_target_verify=True),
     "MTP adaptive verify needs DP=1"),
])
def test_dp_topology_refusals(tiny_llama_dir, flags, match):
    with pytest.raises(ConfigError, match=match):
        LLM(str(tiny_llama_dir), **COMMON, **flags)
