"""The draft step's greedy ceiling (policy.greedy_ceiling, adaptive/step_policy.py; issue 13): with the confidence stop,
a batch of one greedy request that the controller runs at any k >= 1 drafts up to k_max and the stop decides how deep.
Lossless as every k is (R-B2); never applied to a sampled request, to a batch of two, or with the policy off; and its
rounds that the stop ended at one step price k = 1 as served (adaptive/step_served.py)."""

from __future__ import annotations

import json

import pytest

from adaspec.engine.llm_engine import LLM
from adaspec.sampling_params import SamplingParams
from replay_drafter import ReplayDrafter
from small_calibration import CAL, install_cheap_costs

PROMPTS = ["Hello there", "The quick brown fox jumps"]
WIDTH = 3


@pytest.fixture(scope="module")
def reference(tiny_llama_dir):
    llm = LLM(str(tiny_llama_dir), max_seqs_per_batch=4, max_num_batched_tokens=32, max_model_len=320)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    return params, llm.generate(PROMPTS, [params] * len(PROMPTS))


def _engine(tiny_llama_dir, tmp_path, refs, **policy):
    config = tmp_path / "step.json"
    config.write_text(json.dumps({"version": 1, "policy": {"window_size": 4, "update_interval": 2,
                                                           "confidence_stop": 0.5, **policy}, "calibration": CAL}))
    llm = LLM(str(tiny_llama_dir), drafter=ReplayDrafter(refs, max_steps=7), max_seqs_per_batch=4,
              max_num_batched_tokens=32, max_model_len=320, graph_decode_batch_sizes=(1, 2, 4),
              speculative_algorithm="MTP", num_speculative_tokens=WIDTH, enable_adaptive_draft_step=True,
              adaptive_draft_step_config=str(config))
    eng = llm.engine
    install_cheap_costs(eng)
    return llm, eng


def _k1_and_record(eng):
    """The controller chooses k = 1 for every batch (what it does on a table that prices depth high); returns the list
    that collects (plan, result) of every round and the served rounds the controller is told of."""
    ctl = eng.control
    plan = ctl.step.plan

    def k1(*a, **k):
        plan(*a, **k)
        ctl.step.last_probe = ctl.step.last_check = False
        return 1

    ctl.step.plan = k1
    rounds, served = [], []
    run = eng.rounds.run
    eng.rounds.run = lambda chunks, p: rounds.append((p, r := run(chunks, p))) or r
    observe_round = ctl.step.observe_round
    ctl.step.observe_round = lambda *a: served.append(a) or observe_round(*a)
    return rounds, served


def test_one_greedy_request_drafts_to_the_ceiling_and_equals_plain(tiny_llama_dir, tmp_path, reference):
    params, ref = reference
    llm, eng = _engine(tiny_llama_dir, tmp_path, [o.prompt_token_ids + o.token_ids for o in ref])
    rounds, served = _k1_and_record(eng)
    out = llm.generate(PROMPTS[:1], params)[0]
    assert out.token_ids == ref[0].token_ids  # lossless (R-B2)
    drafting = [(p, r) for p, r in rounds if p.num_steps]
    assert drafting and all(p.num_steps == WIDTH and p.ceiling for p, _ in drafting)  # k = 1 ran at k_max
    assert all(p.stop_below == 0.5 for p, _ in drafting)
    assert any(r.verify_lens[0] < WIDTH for _, r in drafting)  # the stop decided the depth
    assert eng.control.summary()["ceiling_batches"] == len(drafting)
    # a ceiling round the stop ended at step 1 is a served k = 1 round; one that went deeper is not k = 1
    by_round = {p.round_id: r.verify_lens[0] for p, r in drafting}
    kinds = {rid: (k, pure) for rid, _, k, _, pure in served if rid in by_round}
    assert any(by_round[rid] == 1 and k == 1 for rid, (k, _) in kinds.items())
    assert all(k == by_round[rid] or k == WIDTH for rid, (k, _) in kinds.items())


@pytest.mark.parametrize("case", ["sampled", "two_requests", "policy_off"])
def test_the_ceiling_is_only_for_one_greedy_request(tiny_llama_dir, tmp_path, reference, case):
    params, ref = reference
    llm, eng = _engine(tiny_llama_dir, tmp_path, [o.prompt_token_ids + o.token_ids for o in ref],
                       **({"greedy_ceiling": False} if case == "policy_off" else {}))
    assert eng.control.step.policy.greedy_ceiling is (case != "policy_off")
    rounds, _ = _k1_and_record(eng)
    if case == "sampled":
        llm.generate(PROMPTS[:1], SamplingParams(temperature=0.8, seed=3, max_tokens=24, ignore_eos=True))
    elif case == "two_requests":
        outs = llm.generate(PROMPTS, [params] * 2)
        assert [o.token_ids for o in outs] == [o.token_ids for o in ref]
    else:
        assert llm.generate(PROMPTS[:1], params)[0].token_ids == ref[0].token_ids
    drafting = [p for p, _ in rounds if p.num_steps]
    if case == "two_requests":  # the second finishes later: its rounds alone are one greedy request again
        drafting = [p for p in drafting if len(p.verify_lens) == 2]
    assert drafting and all(p.num_steps == 1 and not p.ceiling for p in drafting)
    if case != "two_requests":
        assert eng.control.summary()["ceiling_batches"] == 0


def test_a_cost_check_at_k0_runs_plain_k1_never_the_ceiling(tiny_llama_dir, tmp_path, reference):
    """A cost check the controller plans at k = 0 (k = 1 timed next to plain rounds, adaptive/step_served.py) is a plain
    k = 1 round even for one greedy request: at the ceiling it would draft deeper and time nothing. Lossless (R-B2)."""
    params, ref = reference
    llm, eng = _engine(tiny_llama_dir, tmp_path, [o.prompt_token_ids + o.token_ids for o in ref])
    ctl = eng.control
    plan = ctl.step.plan

    def check(*a, **k):
        plan(*a, **k)
        ctl.step.last_probe, ctl.step.last_check = False, True
        return 1

    ctl.step.plan = check
    rounds = []
    run = eng.rounds.run
    eng.rounds.run = lambda chunks, p: rounds.append(p) or run(chunks, p)
    assert llm.generate(PROMPTS[:1], params)[0].token_ids == ref[0].token_ids
    drafting = [p for p in rounds if p.num_steps]
    assert drafting and all(p.num_steps == 1 and p.cost_check and not p.ceiling for p in drafting)
    assert ctl.summary()["ceiling_batches"] == 0


@pytest.mark.parametrize("case", ["greedy", "two_requests"])
def test_mtp_suffix_drafts_to_the_ceiling_without_the_stop(tiny_llama_dir, tmp_path, reference, case):
    """MTP+Suffix (stop 59): its value rule picks each request's source and MTP depth (drafts/hybrid.py), so one greedy
    request that the controller runs at k >= 1 drafts up to k_max with no confidence stop (the stop reads the MTP
    draft's probabilities only); a batch of two keeps the controller's k. Lossless (R-B2)."""
    from adaspec.drafts.hybrid import MTPSuffixDrafter

    params, ref = reference
    refs = [o.prompt_token_ids + o.token_ids for o in ref]
    config = tmp_path / "step.json"
    config.write_text(json.dumps({"version": 1, "policy": {"window_size": 4, "update_interval": 2}, "calibration": CAL}))
    llm = LLM(str(tiny_llama_dir), drafter=MTPSuffixDrafter(ReplayDrafter(refs, max_steps=7)), max_seqs_per_batch=4,
              max_num_batched_tokens=32, max_model_len=320, graph_decode_batch_sizes=(1, 2, 4),
              speculative_algorithm="MTP+Suffix", num_speculative_tokens=WIDTH, enable_adaptive_draft_step=True,
              adaptive_draft_step_config=str(config))
    eng = llm.engine
    install_cheap_costs(eng)
    rounds, _ = _k1_and_record(eng)
    prompts = PROMPTS if case == "two_requests" else PROMPTS[:1]
    outs = llm.generate(prompts, [params] * len(prompts))
    assert [o.token_ids for o in outs] == [o.token_ids for o in ref[: len(prompts)]]
    drafting = [p for p, _ in rounds if p.num_steps]
    assert all(p.stop_below == 0 for p in drafting)
    if case == "greedy":
        assert drafting and all(p.num_steps == WIDTH and p.ceiling for p in drafting)
        assert eng.control.summary()["ceiling_batches"] == len(drafting)
    else:
        pairs = [p for p in drafting if len(p.verify_lens) == 2]
        assert pairs and all(p.num_steps == 1 and not p.ceiling for p in pairs)
