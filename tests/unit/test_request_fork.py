"""Forking and rewinding requests (engine/fork.py), the engine capability fast calibration uses (issue 13).

On the tiny target with real (random-weight) MTP and DSpark drafts:
- `KVCache.copy_slot` and `Drafter.copy_slot` copy exactly the positions asked for;
- a fork of a prefilled request decodes exactly like its source: the same greedy tokens (which
  equal plain greedy decoding of the prompt: the copied target KV is right) and the same number of
  accepted drafts every round (the copied draft state and pending refresh entries are right);
- a rewind by length puts every request back where its snapshot was: the same rounds again give
  the same tokens and acceptance;
- a drafter without `copy_slot` (the replay double) cannot fork, and calibration falls back.
"""

from __future__ import annotations

import pytest
import torch

from adaspec.drafts.base import copy_draft_slot, supports_copy_slot
from adaspec.drafts.factory import build_draft
from adaspec.engine.calibration_loads import SharedPrefixLoad
from adaspec.engine.fork import can_fork, fork_request
from adaspec.engine.llm_engine import LLM
from adaspec.models.loader import load_model
from adaspec.rounds import RoundPlan
from adaspec.runner.kv_cache import KVCache
from adaspec.sampling_params import SamplingParams
from replay_drafter import ReplayDrafter


def _draft(kind, model_dir, width=5):
    cfg, model = load_model(model_dir, torch.float32, "cpu")
    g = torch.Generator().manual_seed(3)
    d2t = torch.randperm(cfg.vocab_size, generator=g)[:96]
    draft = build_draft(kind, cfg, d2t, width=width, num_layers=1, rank=16).init_from_target(model)
    with torch.no_grad():  # weights large enough that proposals depend on the context
        for name, p in draft.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if "norm" not in name else 0.1) + (1.0 if "norm" in name else 0.0))
    return draft.eval().requires_grad_(False)


def _engine(tiny_llama_dir, kind):
    algo = "MTP" if kind == "mtp" else "DSpark"
    return LLM(str(tiny_llama_dir), drafter=_draft(kind, tiny_llama_dir), speculative_algorithm=algo,
               num_speculative_tokens=5, max_seqs_per_batch=4, max_num_batched_tokens=64, max_model_len=256).engine


def test_kv_cache_copy_slot_copies_the_prefix_only():
    kv = KVCache(2, 3, 1, 8, 2, torch.float32)
    for t in kv.k + kv.v:
        t.copy_(torch.randn(t.shape))
    before = [t.clone() for t in kv.k + kv.v]
    kv.copy_slot(0, 2, 5)
    for t, b in zip(kv.k + kv.v, before):
        assert torch.equal(t[2, :, :5], b[0, :, :5]) and torch.equal(t[2, :, 5:], b[2, :, 5:])
        assert torch.equal(t[:2], b[:2])
    with pytest.raises(ValueError):
        kv.copy_slot(0, 3, 2)


@pytest.mark.parametrize("kind", ["mtp", "dspark"])
def test_drafter_copy_slot(tiny_llama_dir, kind):
    draft = _draft(kind, tiny_llama_dir)
    draft.allocate(3, 16)
    caches = draft.cache_k + draft.cache_v if kind == "dspark" else [draft.cache_k, draft.cache_v]
    for t in caches:
        t.copy_(torch.randn(t.shape))
    before = [t.clone() for t in caches]
    assert supports_copy_slot(draft) and copy_draft_slot(draft, 1, 0, 6)
    for t, b in zip(caches, before):
        assert torch.equal(t[0, :, :6], b[1, :, :6]) and torch.equal(t[0, :, 6:], b[0, :, 6:])
    assert not copy_draft_slot(object(), 0, 1, 2) and not supports_copy_slot(ReplayDrafter([], 3))


def _decode(load, plan, rounds):
    """Run `rounds` forced rounds; per request its new tokens, and per round and request the
    accepted count and the draft's scores (which depend on the draft's context: its copied state)."""
    start = [len(r.output_token_ids) for r in load.requests]
    accepted = [[] for _ in load.requests]
    eng = load.engine
    for _ in range(rounds):
        batch = eng.scheduler.schedule(verify_cap=plan.num_steps)
        result = eng.rounds.run(batch.chunks, plan)
        eng.commit(batch, result)
        for i, (m, sc) in enumerate(zip(result.num_accepted, result.draft_scores)):
            accepted[i].append((m, tuple(round(x, 5) for x in sc)))
    return [r.output_token_ids[s:] for r, s in zip(load.requests, start)], accepted


@pytest.mark.parametrize("kind", ["mtp", "dspark"])
def test_forks_decode_like_their_source_and_rewind_exactly(tiny_llama_dir, kind):
    eng = _engine(tiny_llama_dir, kind)
    assert can_fork(eng)
    load = SharedPrefixLoad(eng, 24, torch.Generator().manual_seed(5), width=5)
    load.resize(3)
    assert len({r.slot for r in load.requests}) == 3
    plan = RoundPlan(5, (5, 5, 5))
    tokens, accepted = _decode(load, plan, 6)
    assert tokens[0] == tokens[1] == tokens[2] and accepted[0] == accepted[1] == accepted[2]
    assert sum(m for m, _ in accepted[0]) < 6 * 5  # drafts rejected: the rewind below really rolls back
    assert len({sc for _, sc in accepted[0]}) > 1  # the scores follow the context
    # the fork's state is the source's: its tokens are plain greedy decoding of the prompt
    src = load.requests[0]
    plain = LLM(str(tiny_llama_dir), max_seqs_per_batch=1, max_model_len=256)
    ref = plain.generate([src.prompt_token_ids], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))[0]
    prefix = list(load.snapshots[src.request_id].output_token_ids)
    assert ref.token_ids[:len(prefix) + len(tokens[0])] == prefix + tokens[0]
    load.rewind()
    assert [r.num_computed for r in load.requests] == [25] * 3  # prompt + the cached state's first token
    again, accepted_again = _decode(load, plan, 6)
    assert again == tokens and accepted_again == accepted
    # shrinking frees the slots; a fork can be made again afterwards
    load.resize(1)
    assert len(eng.scheduler.free_slots) == 3
    r = fork_request(eng, load.requests[0])
    assert r.num_computed == load.requests[0].num_computed and r.slot is not None
    load.close()
    eng.abort(r.request_id)
    assert not eng.scheduler.has_unfinished()


def test_fork_needs_a_copying_drafter(tiny_llama_dir):
    llm = LLM(str(tiny_llama_dir), drafter=ReplayDrafter([], max_steps=3), speculative_algorithm="MTP",
              num_speculative_tokens=3, max_seqs_per_batch=2, max_model_len=64)
    assert not can_fork(llm.engine)
