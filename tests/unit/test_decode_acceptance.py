"""The trainer's decode-walk acceptance (issue 11): tokens per round of a greedy decode, not a mean over anchors.

A draft that accepts everything on an easy stretch and nothing on a hard one scores high when every
position counts once, but a decode crosses the easy stretch in few rounds and the hard one in many;
`decode_acceptance_length` must report what such a decode would see, which is what the engine's
`mean_acceptance_length` counts.
"""

from __future__ import annotations

from adaspec.training.evaluate import acceptance_stats, decode_acceptance_length


def records(seq: int, source: str, ms: list[int]):
    return [(seq, source, m, []) for m in ms]


def test_the_walk_jumps_over_accepted_tokens_and_counts_rounds():
    # anchors 0..11: the first six accept 5 each (an easy stretch), the last six none
    ms = [5] * 6 + [0] * 6
    recs = records(0, "code", ms)
    # a decode: round at anchor 0 accepts 5 (6 tokens), next at anchor 6: six rounds of one token
    assert decode_acceptance_length(recs, 5) == {"all": round(12 / 7, 4), "code": round(12 / 7, 4)}
    # the anchor mean counts every position once and says 3.5
    assert acceptance_stats(ms, 5)["mean_acceptance_length"] == 3.5


def test_accepts_are_capped_at_k_and_sources_are_kept_apart():
    recs = records(0, "code", [7, 0, 0, 0, 0, 0, 0, 0, 3]) + records(1, "chat", [0, 1, 0, 0])
    out = decode_acceptance_length(recs, 5)
    # code: anchor 0 accepts min(7, 5) = 5 -> 6 tokens, then anchors 6, 7, 8: 1 + 1 + 4 tokens
    assert out["code"] == round(12 / 4, 4)
    # chat: anchors 0 (1 token), 1 (2 tokens), 3 (1 token)
    assert out["chat"] == round(4 / 3, 4)
    assert out["all"] == round(16 / 7, 4)


def test_no_records_give_no_figures():
    assert decode_acceptance_length([], 5) == {}
