"""Issue 13 (R-D3a, R-F; adaspec's extension): synchronous verify prices drafted rounds from the rounds it served
(adaptive/verify_served.py), so a table that overprices drafted rounds no longer keeps a stream plain."""

from __future__ import annotations

import numpy as np
import pytest

import adaspec.adaptive.verify_served as vs
from adaspec.adaptive.verify_controller import VerifyController
from adaspec.adaptive.verify_served import ServedRows
from test_adaptive_engine import PROMPTS, _engine, _mode_flags, cal_files, plain  # noqa: F401 (fixtures)
from staggered import run_staggered

TABLE = {1: 1.2, 2: 1.35, 3: 1.5, 4: 1.7, 5: 1.9, 6: 2.1}  # drafted rounds at one request; a plain round costs 1.0


def _rows() -> ServedRows:
    return ServedRows(lambda bcap, G: TABLE.get(G), lambda bcap: 1.0)


def _serve(s: ServedRows, start: int, rounds) -> int:
    """Record (G or None, ms, pure) rounds from round `start` on; returns the next round id."""
    for i, (G, ms, pure) in enumerate(rounds):
        s.record(start + i, 1, G, ms, pure)
    return start + len(rounds)


def test_a_steady_drafted_round_is_priced_against_the_plain_rounds_around_it():
    s = _rows()
    n = _serve(s, 1, [(None, 10.0, True)] * 4)  # the first follows no round: it times nothing
    n = _serve(s, n, [(3, 13.0, True)] * 5)  # the first follows a plain round (catch-up): 4 samples
    assert s.correction(1, 3) == 1.0 and s.priced() == {}
    n = _serve(s, n, [(3, 13.0, True)])
    # served 1.3 plain rounds where the table says 1.5: in steps of 0.02
    assert s.correction(1, 3) == pytest.approx(round(1.3 / 1.5 / vs.STEP) * vs.STEP)
    assert s.cost_ms(1, 3) == pytest.approx(1.5 * s.correction(1, 3))
    assert s.priced() == {1: {3: s.correction(1, 3)}}
    # a G never timed takes the nearest timed G's correction; the table's None stays None
    assert s.correction(1, 5) == s.correction(1, 2) == s.correction(1, 3)
    assert s.cost_ms(1, 7) is None
    assert s.correction(2, 3) == 1.0  # another request bucket has its own


def test_probes_impure_rounds_and_stale_references_give_no_sample():
    s = _rows()
    n = _serve(s, 1, [(None, 10.0, True)] * 4)  # the first follows no round: it times nothing
    before = s.version
    n = _serve(s, n, [(2, 12.0, True), (2, 12.0, False)] * 6)  # every pure one follows an impure one
    n = _serve(s, n, [(None, 10.0, False)] + [(2, 12.0, True)] * 8)  # no pure plain round since this run began...
    assert s.priced() == {1: {2: pytest.approx(round(12.0 / 10.0 / 1.35 / vs.STEP) * vs.STEP)}}  # ...but 3 before
    t = _rows()
    m = _serve(t, 1, [(None, 10.0, True)] * (vs.MIN_PLAIN + 1))
    _serve(t, m + vs.PLAIN_AGE, [(2, 12.0, True)] * 10)  # the plain reference is too old
    assert t.priced() == {} and t.version == 0
    u = _rows()
    m = _serve(u, 1, [(None, 10.0, True)] * vs.MIN_PLAIN)
    _serve(u, m, [(2, 12.0, True)] * 10)  # too few plain rounds to reference anything
    assert u.priced() == {}
    assert s.version > before


def test_corrections_are_clipped_and_age_out():
    s = _rows()
    n = _serve(s, 1, [(None, 10.0, True)] * 4)  # the first follows no round: it times nothing
    n = _serve(s, n, [(4, 100.0, True)] * 7)
    assert s.correction(1, 4) == pytest.approx(vs.MAX_CORRECTION)
    s.expire(n + vs.MAX_AGE + 1)
    assert s.priced() == {} and s.correction(1, 4) == 1.0


def test_the_gate_drafts_once_the_drafted_rounds_it_served_were_cheaper_than_the_table_said(no_cold_draft):
    """The same lagged confidences: at the table's prices a drafted round loses to a plain one; timed rounds show
    that drafted rounds cost less, and the gate drafts. The memoised verdict is dropped when the price changes."""
    scores = np.full((1, 5), 0.3)  # (1 + 0.3) / 1.35 < 1 / 1.0 at the table; > 1 / 1.0 at 1.1
    ctrl = VerifyController(5, lambda bcap, G: TABLE.get(G), lambda B: 1 if B == 1 else None, {1: sorted(TABLE)},
                            mode="sync", lag=1, plain_ms=lambda bcap, kv: 1.0)
    ctrl.observe(scores, round_id=0)
    assert not ctrl.predicts_gain(1, round_id=1)
    n = 1
    for _ in range(4):
        ctrl.observe_round(n, [0], False, 10.0, True)
        n += 1
    for _ in range(8):  # drafted rounds of every G served at 1.1 plain rounds
        for G in sorted(TABLE):
            ctrl.observe_round(n, [G - 1], True, 11.0, True)
            n += 1
    assert ctrl.served.priced()[1]
    assert ctrl.predicts_gain(1, round_id=n)
    off = VerifyController(5, lambda bcap, G: TABLE.get(G), lambda B: 1 if B == 1 else None, {1: sorted(TABLE)},
                           mode="sync", lag=1, plain_ms=lambda bcap, kv: 1.0, served=False)
    assert off.served is None
    off.observe_round(1, [0], False, 10.0, True)  # ignored
    assert VerifyController(5, lambda bcap, G: 1.0, lambda B: 1, {1: [1]}, mode="async", lag=2,
                            plain_ms=lambda bcap, kv: 1.0).served is None  # async budgets: the table alone


def test_an_engine_times_its_sync_rounds_and_stays_exact(tiny_llama_dir, plain, linear_backend,  # noqa: F811
                                                          cal_files, capfd):  # noqa: F811
    """Every round reaches the served prices (plain ones as references, drafted ones at their padded rows), the
    start-up log and the summary report them, and greedy output equals plain greedy whatever they decide."""
    params, ref = plain
    capfd.readouterr()
    llm = _engine(tiny_llama_dir, [o.prompt_token_ids + o.token_ids for o in ref], linear_backend=linear_backend,
                  **_mode_flags("verify_sync", cal_files))
    assert "served pricing (sync verify)" in capfd.readouterr().err
    eng = llm.engine
    served = eng.control.verify.served
    assert served is not None
    recorded = []
    record = served.record
    served.record = lambda *a: (recorded.append(a), record(*a))[1]
    done = run_staggered(eng, PROMPTS, params)
    for i, r in enumerate(ref):
        assert done[i].token_ids == r.token_ids, i
    assert recorded and all(ms > 0 for _, _, _, ms, *_ in recorded)
    buckets = dict(eng.control.geometry.target_rows)
    assert all(G is None or G in buckets[bcap] for _, bcap, G, *_ in recorded)
    # a drafted round's committed tokens: its requests plus their accepted drafts
    assert all(tokens is None or tokens >= requests for *_, tokens, requests in recorded)
    assert any(G is not None and tokens is not None for _, _, G, _, _, tokens, _ in recorded)
    assert "served_corrections" in eng.control.summary()


def test_realised_gain_reads_measured_tokens_per_ms_of_drafted_rounds_against_plain_rounds():
    """The gate's third opinion: the newest drafted rounds' committed tokens per ms as served, against plain rounds'."""
    s = _rows()
    n = _serve(s, 1, [(None, 10.0, True)] * 4)  # the first follows no round: it times nothing

    def drafted(count: int, tokens: int, pure: bool = True) -> None:
        nonlocal n
        for _ in range(count):
            s.record(n, 1, 3, 13.0, pure, tokens=tokens)
            n += 1
    drafted(vs.REALISED_MIN_REQUESTS - 1, 2)  # 2 tokens in 13 ms: 1.54x a plain round's rate
    assert not s.realised_gain(1, 1)  # fewer request-rounds than it needs to judge
    drafted(1, 2)
    assert s.realised_gain(1, 1)
    drafted(vs.REALISED_REQUESTS - vs.REALISED_MIN_REQUESTS, 2)  # the window fills up to REALISED_REQUESTS
    drafted(vs.REALISED_REQUESTS // 2 - 1, 1)  # newer losing rounds, fewer than half the window: still a gain
    assert s.realised_gain(1, 1)
    drafted(vs.REALISED_REQUESTS, 1)  # newer rounds that lose push the winners out
    assert not s.realised_gain(1, 1)
    for _ in range(vs.REALISED_REQUESTS):  # probes and impure rounds, and the rounds right after them, are not read
        drafted(1, 3, pure=False)
        drafted(1, 3)
    assert not s.realised_gain(1, 1) and not _rows().realised_gain(1, 1)


def test_only_steady_rounds_time_anything():
    """Stop 63: the plain rounds of a drafting stream were each request's last (no draft token may enter it), 41-67 ms
    where the drafted rounds beside them took 38-42 and a plain stream's ~38; as the reference they made every drafted
    round look 20-30% cheaper. A plain round references only after a plain round, and no round right after an
    impure one (prefill, probe) or another bucket's times anything."""
    s = _rows()
    n = 1
    for _ in range(vs.PLAIN_SAMPLES):  # drafted rounds, each request ending in a plain round
        n = _serve(s, n, [(2, 12.0, True)] * 3 + [(None, 16.0, True)])
    assert s._reference(1, n) is None and s.priced() == {}
    for _ in range(vs.PLAIN_SAMPLES):  # plain rounds after impure ones
        n = _serve(s, n, [(None, 10.0, False), (None, 16.0, True)])
    assert s._reference(1, n) is None
    n = _serve(s, n, [(None, 10.0, True)] * 4)
    assert s._reference(1, n) == 10.0
    s.record(n, 2, None, 30.0, True)  # another bucket: the next round of this one is a transition
    s.record(n + 1, 1, None, 16.0, True)
    assert s._reference(1, n + 1) == 10.0
    s.record(n + 2, 1, 3, 13.0, True, tokens=2)  # the first drafted round after plain ones: read by realised_gain
    s.record(n + 3, 1, 3, 13.0, False, tokens=2)  # a probe
    s.record(n + 4, 1, 3, 13.0, True, tokens=2)  # ... and the round after it are not
    assert sum(r for r, _, _ in s._drafted[1]) == 1


def test_the_gate_drafts_while_its_drafted_rounds_beat_plain_rounds_as_served(no_cold_draft):
    """Predicted to lose (the table and the confidences), but the rounds that drafted committed more tokens per ms
    than plain rounds: the gate drafts; not in a closed batch whose extra tokens are worth less (token_value < 1)."""
    scores = np.full((1, 5), 0.05)
    ctrl = VerifyController(5, lambda bcap, G: TABLE.get(G), lambda B: 1 if B == 1 else None, {1: sorted(TABLE)},
                            mode="sync", lag=1, plain_ms=lambda bcap, kv: 1.0)
    ctrl.observe(scores, round_id=0)
    assert not ctrl.predicts_gain(1, round_id=1)
    for n in range(1, 5):
        ctrl.observe_round(n, [0], False, 10.0, True)
    for n in range(5, 5 + vs.REALISED_REQUESTS):
        ctrl.observe_round(n, [2], True, 13.0, True, accepted=[2])  # 3 tokens in 13 ms
    assert ctrl.predicts_gain(1, round_id=30)
    assert not ctrl.predicts_gain(1, round_id=30, token_value=0.9)


def test_a_cold_bucket_drafts_until_the_realised_check_can_judge_and_no_longer():
    """Stop 63: before realised_gain holds REALISED_MIN_REQUESTS drafted request-rounds of a bucket it cannot judge,
    and a plain verdict of the other opinions would hold until the floor's first probe; the bucket drafts instead, at
    most COLD_REQUESTS request-rounds, and not once its drafted rounds can be judged."""
    s = _rows()
    assert sum(s.cold_draft(4, 4) for _ in range(100)) == vs.COLD_REQUESTS // 4  # counted in request-rounds
    s = _rows()
    s.record(0, 1, None, 10.0, True)
    for i in range(1, vs.REALISED_MIN_REQUESTS):
        assert s.cold_draft(1, 1)
        s.record(i, 1, 3, 13.0, True, tokens=1)
    assert s.cold_draft(1, 1)
    s.record(vs.REALISED_MIN_REQUESTS, 1, 3, 13.0, True, tokens=1)  # now the check can judge: no more unasked drafts
    assert not s.cold_draft(1, 1)
    s = _rows()
    for i in range(vs.COLD_REQUESTS):  # rounds that also prefilled (impure) time nothing: the allowance still ends
        assert s.cold_draft(1, 1)
        s.record(i, 1, 3, 13.0, False, tokens=1)
    assert not s.cold_draft(1, 1)


def _cold_controller() -> VerifyController:
    ctrl = VerifyController(5, lambda bcap, G: TABLE.get(G), lambda B: 1 if B == 1 else None, {1: sorted(TABLE)},
                            mode="sync", lag=1, plain_ms=lambda bcap, kv: 1.0)
    ctrl.observe(np.full((1, 5), 0.05), round_id=0)  # unconfident: the table says a draft loses
    return ctrl


def test_the_gate_of_a_cold_bucket_drafts_its_allowance_then_follows_the_table():
    ctrl = _cold_controller()
    assert not ctrl.predicts_gain(1, round_id=1, max_lens=[0])  # nothing could be verified: no unasked draft
    verdicts = [ctrl.predicts_gain(1, round_id=1 + n) for n in range(2 * vs.COLD_REQUESTS)]
    assert verdicts == [True] * vs.COLD_REQUESTS + [False] * vs.COLD_REQUESTS
    # a closed batch (no request waits for a slot) values extra tokens below decoded ones: no unasked draft there
    assert not _cold_controller().predicts_gain(1, round_id=1, token_value=0.9)


def test_one_served_level_per_bucket_keeps_the_tables_shape_over_G(monkeypatch):
    """Stop 63: per-G corrections differed by as much as one more row costs, and that noise set the early stop's
    marginal prices; every G of a bucket now takes the median of all its G's samples, relative to the table."""
    s = _rows()
    n = _serve(s, 1, [(None, 10.0, True)] * 4)  # the first follows no round: it times nothing
    n = _serve(s, n, [(2, 13.5 * 0.9, True)] * 4 + [(4, 17.0 * 0.94, True)] * 4)  # 0.90 and 0.94 of the table
    c = s.correction(1, 2)
    assert c == s.correction(1, 4) == s.correction(1, 6) and 0.9 <= c <= 0.94  # one level: the median of the 6 kept
    assert s.cost_ms(1, 4) - s.cost_ms(1, 2) == pytest.approx((TABLE[4] - TABLE[2]) * c)  # the table's step
    monkeypatch.setattr(vs, "POOLED", False)  # stop 61's rule, for gate_exp.py's A/B: a level per G
    t = _rows()
    m = _serve(t, 1, [(None, 10.0, True)] * 4)
    _serve(t, m, [(2, 13.5 * 0.9, True)] * 6 + [(4, 17.0 * 0.94, True)] * 6)
    assert t.correction(1, 2) == pytest.approx(0.9) and t.correction(1, 4) == pytest.approx(0.94)
