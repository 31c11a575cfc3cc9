"""The scheduler charges what a round really computes (issue 13, R-A3).

Decoding requests pay one row each; prefill and admission come next; speculative rows take what
is left, shared evenly, each request at most what its plan can verify. So a waiting request is
admitted when a slot is free even if full-width verification would not fit, no round computes
more rows than `max_num_batched_tokens`, and greedy output stays exactly plain greedy.
"""

from __future__ import annotations

import pytest

from adaspec.engine.llm_engine import LLM
from adaspec.engine.request import Request
from adaspec.engine.scheduler import Scheduler, share_rows
from adaspec.geometry import PreparedGeometry
from adaspec.sampling_params import SamplingParams
from replay_drafter import ReplayDrafter
from staggered import run_staggered

GREEDY = SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)


def test_share_rows_water_fills():
    assert share_rows([3, 0, 2], 10) == [3, 0, 2]  # everything fits
    assert share_rows([7, 7, 7], 10) == [4, 3, 3]  # even shares, the earlier request takes the remainder
    assert share_rows([1, 7, 7], 9) == [1, 4, 4]  # a small want leaves its share to the others
    assert share_rows([5, 5], 0) == [0, 0]


def _decoding(s: Scheduler, n: int, prompt_len: int = 4) -> list[Request]:
    reqs = [Request(f"d{i}", None, list(range(1, prompt_len + 1)), GREEDY) for i in range(n)]
    for r in reqs:
        s.add(r)
    s.schedule()
    for r in reqs:  # prefilled, one token sampled: decoding from now on
        r.num_computed = prompt_len
        r.output_token_ids.append(7)
    return reqs


def test_waiting_request_is_admitted_although_full_width_does_not_fit():
    s = Scheduler(num_slots=4, max_num_batched_tokens=12)
    _decoding(s, 2)
    waiting = [Request(f"w{i}", None, list(range(1, 7)), GREEDY) for i in range(2)]
    for r in waiting:
        s.add(r)
    batch = s.schedule(verify_cap=7)  # width 7: 2 x (1 + 7) = 16 rows would exceed 12
    kinds = [(c.request.request_id, c.is_decode, len(c.token_ids), c.verify_cap) for c in batch.chunks]
    # decodes 1 row each, w0 its whole prompt (6), w1 the 4 rows left; nothing left to verify
    assert kinds == [("d0", True, 1, 0), ("d1", True, 1, 0), ("w0", False, 6, 0), ("w1", False, 4, 0)]
    assert batch.max_rows == 12 and all(r.slot is not None for r in waiting)


def test_speculation_gets_the_rows_prefill_leaves_and_never_more():
    s = Scheduler(num_slots=4, max_num_batched_tokens=12)
    _decoding(s, 3)
    batch = s.schedule(verify_cap=7)
    assert [c.verify_cap for c in batch.chunks] == [3, 3, 3] and batch.max_rows == 12
    batch = s.schedule(verify_cap=lambda r: 1 if r.request_id == "d0" else 7)
    assert [c.verify_cap for c in batch.chunks] == [1, 4, 4]
    roomy = Scheduler(num_slots=4, max_num_batched_tokens=64)
    _decoding(roomy, 3)
    assert [c.verify_cap for c in roomy.schedule(verify_cap=7).chunks] == [7, 7, 7]


def test_prepared_rows_never_exceed_the_step_budget():
    geo = PreparedGeometry.build([1, 4], width=7, max_rows=20)
    assert max(geo.target_rows[4]) == 20 and max(geo.target_rows[1]) == 8


@pytest.mark.parametrize("budget", [4, 9])
def test_tight_row_budget_stays_exact_and_within_the_limit(tiny_llama_dir, budget):
    prompts = ["Hello there", "a", "The quick brown fox", "1 2 3 4 5 6", "xyz xyz", "Q?"]
    params = [SamplingParams(temperature=0, max_tokens=6 + 2 * i, ignore_eos=True) for i in range(len(prompts))]
    ref = LLM(str(tiny_llama_dir), max_seqs_per_batch=4, max_num_batched_tokens=32).generate(prompts, params)
    llm = LLM(str(tiny_llama_dir), drafter=ReplayDrafter([o.prompt_token_ids + o.token_ids for o in ref], max_steps=5),
              speculative_algorithm="MTP", num_speculative_tokens=5, max_seqs_per_batch=4,
              max_num_batched_tokens=budget)
    eng, rows, waits = llm.engine, [], []
    run = eng.rounds.run

    def counted(chunks, plan):
        result = run(chunks, plan)
        rows.append(sum(len(c.token_ids) for c in chunks) + sum(result.verify_lens))
        # a request left waiting beside a free slot: only prompt rows may have used the budget
        if eng.scheduler.waiting and eng.scheduler.free_slots:
            waits.append(sum(result.verify_lens))
        return result

    eng.rounds.run = counted
    done = run_staggered(eng, prompts, params, every=1, per_arrival=2)
    assert [d.token_ids for d in done] == [r.token_ids for r in ref]
    assert max(rows) <= budget  # no round exceeds max_num_batched_tokens
    assert not any(waits)  # nobody waited for a free slot while guesses were verified
    assert eng.spec_stats.summary()["drafts"] > 0  # speculation still ran when rows were left
