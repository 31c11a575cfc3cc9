"""Public injection points for baselines (issue 13 item 6): LLMEngine.plan_transform, AdaptiveControl.reset."""

from __future__ import annotations

import pytest

from adaspec.rounds import RoundPlan
from test_adaptive_engine import PROMPTS, _engine, _mode_flags, cal_files, plain  # noqa: F401 (fixtures)


def test_plan_transform_shortens_plans_and_output_stays_exact(tiny_llama_dir, plain, linear_backend):  # noqa: F811
    params, ref = plain
    from replay_drafter import ReplayDrafter
    from adaspec.engine.llm_engine import LLM

    llm = LLM(str(tiny_llama_dir), drafter=ReplayDrafter([o.prompt_token_ids + o.token_ids for o in ref], max_steps=3),
              speculative_algorithm="MTP", num_speculative_tokens=3, max_seqs_per_batch=4,
              max_num_batched_tokens=32, max_model_len=320, linear_backend=linear_backend)
    seen = []

    def one_row(batch, p):
        seen.append(p.verify_lens)
        return RoundPlan(p.num_steps, tuple(min(1, c) for c in p.verify_lens), round_id=p.round_id)

    llm.engine.plan_transform = one_row
    verified = []
    llm.engine.round_observers.append(lambda ev: verified.extend(ev.result.verify_lens))
    outs = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
    assert any(max(v, default=0) > 1 for v in seen)  # the default plan verified more ...
    assert verified and max(verified) == 1  # ... and the rounds ran the transformed plan

    for bad in (lambda batch, p: RoundPlan(p.num_steps + 1, p.verify_lens, round_id=p.round_id),
                lambda batch, p: RoundPlan(1, p.verify_lens, round_id=p.round_id)):  # lens beyond the draft steps
        llm.engine.plan_transform = bad
        with pytest.raises(Exception, match="only shorten"):
            llm.generate(PROMPTS[:1], params[:1])
        llm.engine.plan_transform = None
    llm.engine.plan_transform = lambda batch, p: RoundPlan(p.num_steps, p.verify_lens, "sync", round_id=p.round_id)
    with pytest.raises(Exception, match="needs rounds.verify_controller"):
        llm.generate(PROMPTS[:1], params[:1])


def test_reset_rebuilds_cold_controllers_on_the_same_table(tiny_llama_dir, plain, linear_backend, cal_files):  # noqa: F811
    params, ref = plain
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **_mode_flags("verify_async", cal_files))
    ctl = llm.engine.control
    llm.generate(PROMPTS, params)
    old_verify, table = ctl.verify, ctl.table
    assert ctl.floor.rounds > 0 and sum(old_verify.g_histogram.values()) > 0
    ctl.reset()
    assert ctl.verify is not old_verify and ctl.table is table
    assert llm.engine.rounds.verify_controller is ctl.verify
    assert ctl.floor.rounds == 0 and not ctl.verify.g_histogram and not ctl.verify.lagged
    outs = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
