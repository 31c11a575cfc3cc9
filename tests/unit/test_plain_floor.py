"""The plain floor of adaptive target verify (issue 13, adaptive/floor.py; R-B2, R-D3, R-D4).

- a round whose lagged budget admits no candidate skips the draft (async), and sync mode skips it
  when the lagged rounds predict that no budget above B rows pays;
- skipped rounds are plain rounds: the drafter is not called, its refresh is deferred, and greedy
  output still equals plain greedy (with staggered arrivals, with and without schedule overlap);
- exploration is bounded and counted: one probe after `probe_interval` skipped rounds, backing off.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from adaspec.adaptive.floor import PlainFloor, probe_requests
from adaspec.adaptive.step_controller import DraftStepController
from adaspec.adaptive.verify_controller import VerifyController
from staggered import run_staggered
from test_adaptive_engine import PROMPTS, _engine, _mode_flags, cal_files, plain  # noqa: F401 (fixtures)


def test_floor_skips_until_the_probe_interval_then_probes_with_backoff():
    f = PlainFloor(probe_interval=3, max_probe_interval=12)
    verdicts = [f.decide(False) for _ in range(37)]
    probes = [i for i, v in enumerate(verdicts) if v == "probe"]
    assert probes == [3, 10, 23, 36]  # after 3, then 6, then 12 (the cap) skipped rounds
    assert all(v == "skip" for i, v in enumerate(verdicts) if i not in probes)
    assert f.decide(True) == "draft"  # a round predicted to gain resets the interval
    assert [f.decide(False) for _ in range(4)] == ["skip", "skip", "skip", "probe"]
    assert f.summary() == {"rounds": 42, "skipped_draft": 36, "probes": 5, "probe_share": 5 / 42}
    assert "probe rate <= 25.0% of rounds" in f.describe() and "doubling up to 12" in f.describe()
    assert PlainFloor(probe_interval=0).decide(False) == "skip"
    # a probe that falls on a round in which no request may verify a draft token waits for one that can
    f = PlainFloor(probe_interval=2)
    assert [f.decide(False, can_verify=c) for c in (True, True, False, False, True)] == [
        "skip", "skip", "skip", "skip", "probe"]
    assert f.probes == 1 and f.skipped == 4
    with pytest.raises(ValueError, match="probe_interval"):
        PlainFloor(probe_interval=-1)
    with pytest.raises(ValueError, match="max_probe_interval"):
        PlainFloor(probe_interval=10, max_probe_interval=5)


def test_the_probe_backoff_is_forgotten_when_the_batch_has_turned_over():
    """The interval doubles while probes find nothing; what they found was about the requests then decoding.
    Once none of those is left (at B = 1: the next request of a mixed stream), the base interval applies again."""
    f = PlainFloor(probe_interval=3, max_probe_interval=48)
    verdicts = [f.decide(False, True, ["a"]) for _ in range(37)]
    assert [i for i, v in enumerate(verdicts) if v == "probe"] == [3, 10, 23]  # 3, 6, 12, then 24 skipped rounds
    assert [f.decide(False, True, ["a", "b"]) for _ in range(3)] == ["skip"] * 3  # "a" still here: backoff kept
    # "b" arrived after the last probe; with "a" gone, the batch has turned over: base interval, and the
    # 16 rounds skipped since the last probe already exceed it
    assert f.decide(False, True, ["b"]) == "probe"
    assert [f.decide(False, True, ["b"]) for _ in range(7)] == ["skip"] * 6 + ["probe"]  # 3, then 6
    assert f.decide(False, True, ["c"]) == "skip"  # a new batch, but the streak (0) is below the base interval
    f = PlainFloor(probe_interval=3, max_probe_interval=48)
    assert [f.decide(False) for _ in range(11)].count("probe") == 2  # without request ids: the old rule


def _controller(extra_row_cost: float, mode: str = "sync", **kw) -> VerifyController:
    # bcap 1, target buckets G = 1, 2, 6: G = 1 costs 1 ms, every bucket above it `extra_row_cost`
    cost = lambda bcap, G: 1.0 if G == bcap else extra_row_cost  # noqa: E731
    return VerifyController(5, cost, lambda B: 1 if B == 1 else None, {1: [1, 2, 6]}, mode=mode, lag=1, **kw)


def test_sync_gate_predicts_from_lagged_rounds_only():
    ctrl = _controller(extra_row_cost=10.0)
    assert not ctrl.predicts_gain(1, round_id=0)  # no feedback yet: the prior (0.5 per position) says no row pays
    assert _controller(extra_row_cost=10.0, prior_rate=None).predicts_gain(1, round_id=0)  # no prior: R-D3a drafts
    cheap = _controller(extra_row_cost=1.2)
    assert cheap.predicts_gain(1, round_id=0)  # the prior: (1 + 0.5) / 1.2 > 1
    cheap.observe(np.full((1, 5), 0.1), round_id=0)
    assert cheap.predicts_gain(1, round_id=0)  # round 0 is not visible while planning round 0: still the prior
    assert not cheap.predicts_gain(1, round_id=1)  # (1 + 0.1) / 1.2 < 1
    ctrl.observe(np.full((1, 5), 0.9), round_id=0)
    assert not ctrl.predicts_gain(1, round_id=1)  # (1 + 0.9) / 10 < 1 / 1: no budget above B pays
    sure = _controller(extra_row_cost=1.2)
    sure.observe(np.full((1, 5), 0.9), round_id=0)
    assert sure.predicts_gain(1, round_id=1)  # (1 + 0.9) / 1.2 > 1
    assert sure.predicts_gain(3, round_id=1)  # no request bucket for 3: draft (full-width fallback)


class CountingDrafter:
    """Wraps the replay drafter and counts the proposing calls (refresh-only calls would be counted too)."""

    def __init__(self, inner):
        self.inner, self.calls, self.steps, self.sizes = inner, 0, [], []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def draft(self, batch):
        self.calls += 1
        self.steps.append(batch.num_steps)
        self.sizes.append(len(batch.slots))
        return self.inner.draft(batch)


@pytest.mark.parametrize("mode", ["verify_sync", "verify_async"])
def test_skipped_rounds_do_not_draft_and_greedy_stays_exact(tiny_llama_dir, plain, linear_backend,  # noqa: F811
                                                           cal_files, mode):  # noqa: F811
    params, ref = plain
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **_mode_flags(mode, cal_files))
    eng = llm.engine
    # a cost table under which no verified row ever pays: every round after the first drafted one skips
    eng.control.verify.cost_ms = lambda bcap, G: 1.0 if G == bcap else 1e6
    eng.control.floor = PlainFloor(probe_interval=4)
    counting = CountingDrafter(eng.rounds.drafter)
    eng.rounds.drafter = counting
    plans, run = [], eng.rounds.run

    def recording_run(chunks, plan):  # every drafting round's plan, with the pending entries before it
        decoding = [c.request.request_id for c in chunks if c.is_decode]
        if plan.num_steps and decoding:
            caps = [c.verify_cap for c in chunks if c.is_decode]
            plans.append((plan, [(cap == 0, eng.rounds.pending_entries(r)) for r, cap in zip(decoding, caps)]))
        result = run(chunks, plan)
        if plan.num_steps and plan.draft_only is not None:
            assert all(L == 0 for i, L in enumerate(result.verify_lens) if i not in plan.draft_only)
            assert all(not s for i, s in enumerate(result.draft_scores) if i not in plan.draft_only)
        return result
    eng.rounds.run = recording_run
    done = run_staggered(eng, PROMPTS, params)
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids, (mode, i)
    s = eng.control.floor.summary()
    assert s["skipped_draft"] > 0 and s["probes"] > 0
    assert s["probes"] <= s["rounds"] / 5 + 1  # at most one probe per 4 skipped rounds (fewer: backoff)
    assert counting.calls == s["rounds"] - s["skipped_draft"]  # skipped rounds never reach the drafter
    assert all(k == eng.num_draft_tokens for k in counting.steps)  # no refresh-only calls: refresh is deferred
    assert eng.control.summary()["probes"] == s["probes"]
    # a probe drafts for a quarter of the batch (at least one request), those that may verify a draft token
    # with the fewest pending refresh entries; every other drafting round drafts for the whole batch
    assert len(plans) == counting.calls
    subsets = 0
    for (plan, pending), size in zip(plans, counting.sizes):
        B = len(plan.verify_lens)
        if not plan.probe or probe_requests(B) == B:
            assert plan.draft_only is None and size == B
            continue
        subsets += 1
        assert size == len(plan.draft_only) == probe_requests(B)
        assert max(pending[i] for i in plan.draft_only) <= min(
            pending[i] for i in range(B) if i not in plan.draft_only)
    assert subsets > 0


def test_rounds_in_which_no_request_may_verify_do_not_call_the_drafter(tiny_llama_dir, plain,  # noqa: F811
                                                                       linear_backend):
    """A fixed-width engine: where prefill spends the step's row budget (32 tokens here) every decoding
    request's verify cap is 0, so its draft would be thrown away; such rounds run plain, the refresh
    deferred, and greedy output equals plain greedy. (Calibration's exact plans still draft with nothing
    verified: test_calibration_measures_plain_rounds_for_adaptive_verify times that draft.)"""
    from adaspec.engine.llm_engine import LLM
    from replay_drafter import ReplayDrafter

    params, ref = plain
    llm = LLM(str(tiny_llama_dir), drafter=ReplayDrafter([o.prompt_token_ids + o.token_ids for o in ref], max_steps=7),
              max_seqs_per_batch=4, max_num_batched_tokens=32, max_model_len=320, linear_backend=linear_backend,
              speculative_algorithm="MTP", num_speculative_tokens=3)
    eng = llm.engine
    counting = CountingDrafter(eng.rounds.drafter)
    eng.rounds.drafter = counting
    capless, drafting, run = [], [], eng.rounds.run

    def recording_run(chunks, plan):
        caps = [c.verify_cap for c in chunks if c.is_decode]
        if caps:
            (drafting if any(plan.verify_lens) else capless).append(plan)
        return run(chunks, plan)
    eng.rounds.run = recording_run
    done = run_staggered(eng, PROMPTS, params)
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids, i
    assert capless and all(p.num_steps == 3 for p in capless)  # planned at full width, nothing verifiable
    assert counting.calls == len(drafting)  # ... and never drafted


@pytest.mark.parametrize("mode", ["draft_step", "draft_step_overlap"])
def test_k_zero_rounds_do_not_call_the_drafter(tiny_llama_dir, plain, linear_backend, cal_files, mode):  # noqa: F811
    """k = 0 is a plain round: no refresh-only draft call (the refresh waits for the next drafting round)."""
    params, ref = plain
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **_mode_flags(mode, cal_files))
    eng = llm.engine
    old = eng.control.step
    # a controller whose cost table says speculation never pays: its cold start picks k = 0 (and an
    # explore_overhead that keeps probing a 10^6x dearer k at the base rate, so probes happen here)
    policy = dataclasses.replace(old.policy, explore_overhead=1e9)
    step = eng.control.step = DraftStepController(old.k_max, policy, lambda bcap, k: 1.0 if k == 0 else 1e6,
                                                  old.pad_requests, lag=eng.control.lag, probe_interval=6)
    counting = CountingDrafter(eng.rounds.drafter)
    eng.rounds.drafter = counting
    done = run_staggered(eng, PROMPTS, params)
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids, (mode, i)
    assert step.decisions[0].reason.startswith("cold start") and step.decisions[0].k == 0
    assert step.probe_rounds > 0 and counting.calls == step.probe_rounds  # only probes draft
    assert all(k >= 1 for k in counting.steps)  # probes draft; no refresh-only calls
    assert set(counting.sizes) == {probe_requests(4)}  # for a quarter of the batch (<= 4 requests here: one)


def test_pending_refresh_entries_are_bounded_by_refresh_only_calls(tiny_llama_dir, plain, linear_backend,  # noqa: F811
                                                                   cal_files):  # noqa: F811
    """A draft step stuck at k = 0 (speculation never pays, no probes): each request's entries wait,
    and past `max_pending` positions they go to the drafter in a refresh-only call (num_steps 0) at the
    end of the round; greedy output still equals plain greedy (round_runner.py)."""
    params, ref = plain
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **_mode_flags("draft_step", cal_files))
    eng = llm.engine
    old = eng.control.step
    eng.control.step = DraftStepController(old.k_max, old.policy, lambda bcap, k: 1.0 if k == 0 else 1e6,
                                           old.pad_requests, lag=eng.control.lag, probe_interval=0)
    eng.rounds.max_pending = 8
    counting = CountingDrafter(eng.rounds.drafter)
    eng.rounds.drafter = counting
    most, run = [], eng.rounds.run

    def recording_run(chunks, plan):
        result = run(chunks, plan)
        decoding = [c.request.request_id for c in chunks if c.is_decode]
        most.append(max((eng.rounds.pending_entries(r) for r in decoding), default=0))
        return result
    eng.rounds.run = recording_run
    done = run_staggered(eng, PROMPTS, params)
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids, i
    assert counting.calls > 0 and set(counting.steps) == {0}  # only refresh-only calls
    assert max(most) <= 8 and 8 in most  # bounded, and the bound was reached


def test_a_draft_after_a_refresh_only_call_starts_from_the_newest_entry(tiny_llama_dir, plain, linear_backend):  # noqa: F811
    """A refresh-only call hands over all but each request's newest entry, from which the next drafting
    round proposes. (It used to hand over everything, and the request's next drafting round found no
    entries and failed: a prompt longer than max_pending, a plain round, then a draft, which is what
    the default start-up calibration does with its 1200-token prompts.) Greedy output stays exact."""
    from adaspec.rounds import RoundPlan

    params, ref = plain
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  speculative_algorithm="MTP", num_speculative_tokens=3)
    eng = llm.engine
    eng.rounds.max_pending = 8
    counting = CountingDrafter(eng.rounds.drafter)
    eng.rounds.drafter = counting
    # plain rounds until the first refresh-only call; after it a round drafts whenever the drafter's call
    # count is a multiple of 3, so drafting rounds come right after refresh-only calls; the rest run plain
    eng.plan_transform = lambda batch, plan: (
        plan if 0 in counting.steps and len(counting.steps) % 3 == 0 else RoundPlan.plain(len(plan.verify_lens)))
    handed, inner = [], counting.draft

    def recording_draft(batch):
        if batch.num_steps == 0:
            handed.extend(batch.entry_lens)
        return inner(batch)
    counting.draft = recording_draft
    done = run_staggered(eng, PROMPTS, params)
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids, i
    first = counting.steps.index(0)
    assert any(k >= 1 for k in counting.steps[first + 1:])  # drafting rounds followed a refresh-only call
    assert handed and min(handed) >= 8  # each refresh-only call handed over all but the newest of > 8 entries


def test_budget_counts_not_drafting_as_a_candidate_when_the_plain_cost_is_known():
    """The drafted G = B cell includes the draft; a plain round costs less, and can win."""
    from adaspec.adaptive.verify_budget import budget_from_lagged

    lagged = [np.full((1, 5), 0.3)]
    cost = lambda bcap, G: {1: 1.2, 2: 1.25, 6: 3.0}[G]  # noqa: E731 - G = 1 drafts and verifies nothing
    d = budget_from_lagged(lagged, 1, 1, cost, {1: [1, 2, 6]})
    assert d.reason == "argmax" and d.G == 2  # (1 + 0.3) / 1.25 beats 1 / 1.2 without a plain cost
    d = budget_from_lagged(lagged, 1, 1, cost, {1: [1, 2, 6]}, plain_cost=0.75)
    assert d.reason == "plain" and d.G == 1 and d.predicted[0] == pytest.approx(1 / 0.75)
    d = budget_from_lagged(lagged, 1, 1, cost, {1: [1, 2, 6]}, plain_cost=1.0)
    assert d.reason == "argmax" and d.G == 2  # 1.04 tokens/ms beats the plain 1.0


def test_calibration_measures_plain_rounds_for_adaptive_verify(tiny_llama_dir, plain, linear_backend,  # noqa: F811
                                                              cal_files, tmp_path):  # noqa: F811
    import json

    params, ref = plain
    out = tmp_path / "t.json"
    llm = _engine(tiny_llama_dir, [], linear_backend=linear_backend, adaptive_target_verify_cost_table_output=str(out),
                  **_mode_flags("verify_sync", cal_files))
    table = llm.engine.control.table
    assert sorted(table.metadata.plain_ms) == table.metadata.request_buckets == [1, 2, 4]
    assert all(v > 0 for v in table.metadata.plain_ms.values())
    assert all(x > 0 for xs in table.metadata.grid.values() for x in xs)  # the plain points are not grid cells
    assert table.plain_cost_ms(2) == table.metadata.plain_ms[2] and table.plain_cost_ms(8) is None
    saved = json.loads(out.read_text())["metadata"]["plain_ms"]
    assert {int(b) for b in saved} == {1, 2, 4}
    # on CPU the plain cost is timed inside the G = Bcap rounds (their time less the draft call): no
    # rounds of its own, one plain and one G = Bcap stat per bucket from the same windows
    m = llm.engine.control.measurement
    stats = {(s.bcap, s.x): s for s in m.stats}
    for b in (1, 2, 4):
        assert (b, 0) in stats and (b, b) in stats
        assert len(stats[b, 0].windows) == len(stats[b, b].windows)
        assert 0 < stats[b, 0].cost_s < stats[b, b].cost_s  # the draft call took some time
    eff = llm.engine.control.effective
    assert m.rounds == eff.num_points * eff.rounds_per_point + m.extra_rounds  # no plain point was run


@pytest.mark.parametrize("mode", ["verify_sync", "verify_async", "draft_step"])
def test_seeded_random_requests_through_skipped_rounds_equal_seeded_plain(tiny_llama_dir, linear_backend,
                                                                         cal_files, mode):  # noqa: F811
    """R-B3 / R-B5 in the new path: seeded random requests sample exactly what seeded plain samples,
    whether a round skipped its draft, probed, or drafted (the distribution is the target's: every
    token is a plain-decode sample)."""
    from adaspec.engine.llm_engine import LLM
    from adaspec.sampling_params import SamplingParams

    params = [SamplingParams(temperature=0.8, top_k=20, top_p=0.95, max_tokens=12, ignore_eos=True, seed=7 + i)
              for i in range(len(PROMPTS))]
    plain_llm = LLM(str(tiny_llama_dir), max_seqs_per_batch=4, max_num_batched_tokens=32, max_model_len=320,
                    linear_backend=linear_backend)
    ref = plain_llm.generate(PROMPTS, params)
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **_mode_flags(mode, cal_files))
    ctl = llm.engine.control
    if ctl.verify is not None:
        ctl.verify.cost_ms = lambda bcap, G: 1.0 if G == bcap else 1e6
        ctl.floor = PlainFloor(probe_interval=3)
    else:
        old = ctl.step
        ctl.step = DraftStepController(old.k_max, dataclasses.replace(old.policy, explore_overhead=1e9),
                                       lambda bcap, k: 1.0 if k == 0 else 1e6,  # probes at the base rate
                                       old.pad_requests, lag=ctl.lag, probe_interval=3)
    done = run_staggered(llm.engine, PROMPTS, params)
    assert [done[i].token_ids for i in range(len(PROMPTS))] == [r.token_ids for r in ref]
    summary = ctl.summary()
    assert summary["probes"] > 0 and (ctl.verify is None or summary["skipped_draft"] > 0)


def test_metrics_count_probe_and_plain_rounds_of_an_adaptive_engine(tiny_llama_dir, plain, linear_backend,  # noqa: F811
                                                                    cal_files):  # noqa: F811
    """Issue 13: the share of probe rounds is in /metrics (probe / adaptive rounds), beside plain rounds."""
    from types import SimpleNamespace

    from adaspec.metrics.prometheus import ServerMetrics

    params, ref = plain
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **_mode_flags("verify_sync", cal_files))
    eng = llm.engine
    eng.control.verify.cost_ms = lambda bcap, G: 1.0 if G == bcap else 1e6
    eng.control.floor = PlainFloor(probe_interval=4)
    fake = SimpleNamespace(engine=eng, observers=[], on_output=None, on_failed=None, num_waiting=0)
    m = ServerMetrics()
    m.bind(fake)
    eng.round_observers.extend(fake.observers)
    run_staggered(eng, PROMPTS, params)
    text = m.render().decode()

    def value(name):
        return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")))

    s = eng.control.floor.summary()
    assert value("adaspec:adaptive_rounds_total") == s["rounds"]
    assert value("adaspec:adaptive_probe_rounds_total") == s["probes"] > 0
    assert value("adaspec:adaptive_plain_rounds_total") == s["skipped_draft"] > 0
    # the sync gate's correction of the draft's confidences (adaptive/draft_calibration.py), learnt from verified rounds
    assert value("adaspec:adaptive_confidence_ratio") == eng.control.verify.confidence_ratio()
    assert len(eng.control.verify.confidence._rounds) > 0


def test_plain_costs_survive_save_and_load_and_bad_ones_are_refused(tiny_llama_dir, linear_backend, cal_files,  # noqa: F811
                                                                   tmp_path):
    import json

    from adaspec.calibration.cost_table import CostTable, CostTableError

    out = tmp_path / "t.json"
    llm = _engine(tiny_llama_dir, [], linear_backend=linear_backend, adaptive_target_verify_cost_table_output=str(out),
                  **_mode_flags("verify_sync", cal_files))
    saved = llm.engine.control.table
    loaded = CostTable.load(out, llm.engine.control.compat)
    assert loaded.metadata.plain_ms == saved.metadata.plain_ms and loaded.plain_cost_ms(4) == saved.plain_cost_ms(4)
    data = json.loads(out.read_text())
    for bad, why in (({"8": 1.0}, "not in metadata.request_buckets"), ({"2": -1.0}, "positive finite"),
                     ({"2": float("inf")}, "positive finite")):
        edited = json.loads(json.dumps(data))
        edited["metadata"]["plain_ms"] = bad
        with pytest.raises(CostTableError, match=why):
            CostTable.from_dict(edited, source="edited.json")


def test_floor_is_off_for_drafts_whose_proposals_lagged_feedback_cannot_foresee():
    """Suffix and MTP+Suffix find a match the moment the text repeats; skipping their nearly free
    draft on the strength of earlier rounds would miss it (issue 10 x issue 13)."""
    from types import SimpleNamespace

    from adaspec.adaptive.floor import floor_applies

    assert not floor_applies(SimpleNamespace(kind="suffix")) and not floor_applies(SimpleNamespace(kind="mtp+suffix"))
    assert floor_applies(SimpleNamespace(kind="mtp")) and floor_applies(SimpleNamespace(kind="dspark"))


def test_lagged_feedback_stays_bounded_over_a_long_sync_run(tiny_llama_dir, plain, linear_backend,  # noqa: F811
                                                           cal_files):  # noqa: F811
    """Sync admission keeps only what its gate reads: the lagged heap never grows with the run."""
    params, ref = plain
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **_mode_flags("verify_sync", cal_files))
    llm.generate(PROMPTS, params)
    assert llm.engine.control.verify.feedback.pending <= 2


def test_sync_gate_predicts_what_the_early_stop_admits_not_the_best_budget(no_cold_draft):
    """A candidate worth 0.9 of a token cannot pay for a row bucket of 4 rows costing 1.5x (the
    early stop admits nothing), although four such candidates would (the async estimator searches
    past that cliff): the sync gate skips the draft, the async budget drafts."""
    from adaspec.adaptive.verify_budget import budget_from_lagged, sync_gain_from_lagged

    def cost(c8):  # bcap 4: rows 5..8 pad to the bucket of 8, rows 9..16 to 16
        return lambda bcap, G: {4: 1.0, 8: c8, 16: 3.0}[G]
    pad = lambda bcap, rows: 4 if rows <= 4 else 8 if rows <= 8 else 16 if rows <= 16 else None  # noqa: E731
    buckets = {4: [4, 8, 16]}
    lagged = [np.tile([0.9, 0.0, 0.0], (4, 1))]
    d = budget_from_lagged(lagged, 4, 4, cost(1.5), buckets, plain_cost=0.95)
    assert d.reason == "argmax" and d.G == 8  # (4 + 3.6) / 1.5 = 5.07 > 4 / 0.95
    s = sync_gain_from_lagged(lagged, 4, 4, cost(1.5), pad, width=3, plain_cost=0.95)
    assert s.reason == "plain" and s.G == 4  # (4 + 0.9) / 1.5 < 4 / 1.0: the early stop admits nothing
    sync = VerifyController(3, cost(1.5), lambda B: 4 if B <= 4 else None, buckets, pad, mode="sync", lag=1,
                            plain_ms=lambda bcap, kv: 0.95)
    sync.observe(np.tile([0.9, 0.0, 0.0], (4, 1)), round_id=0)
    assert not sync.predicts_gain(4, round_id=1)
    # a cheaper cliff: the first candidate pays for it, the early stop walks on to the 8-row bucket
    s = sync_gain_from_lagged(lagged, 4, 4, cost(1.2), pad, width=3, plain_cost=0.95)
    assert s.reason == "early stop" and s.G == 8 and s.predicted[8] == pytest.approx(7.6 / 1.2)
    cheap = VerifyController(3, cost(1.2), lambda B: 4 if B <= 4 else None, buckets, pad, mode="sync", lag=1,
                             plain_ms=lambda bcap, kv: 0.95)
    cheap.observe(np.tile([0.9, 0.0, 0.0], (4, 1)), round_id=0)
    assert cheap.predicts_gain(4, round_id=1)
    # outside the cost coverage the gate drafts (R-D3a's full-width fallback decides)
    assert sync_gain_from_lagged(lagged, 4, 4, lambda bcap, G: None, pad, width=3).reason.startswith("fallback")
