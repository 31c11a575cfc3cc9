"""bench/stop_rules.py's decode walk (issue 13): the stop rule ends drafting where the engine's confidence stop does
(adaptive/scoring.confident_lengths), and the walk moves and charges rounds as a greedy decode does."""

from __future__ import annotations

import random

import torch

from adaspec.adaptive.scoring import confident_lengths
from bench.stop_rules import stop_rule, walk


def test_stop_rule_ends_where_the_engines_confidence_stop_ends():
    rng = random.Random(0)
    for _ in range(300):
        k = rng.randint(2, 6)
        scores = [rng.random() ** 0.3 for _ in range(k)]
        theta = rng.choice([0.3, 0.5, 0.6, 0.8])
        engine = confident_lengths(torch.tensor([scores], dtype=torch.float32), theta)[0]
        assert stop_rule([theta], k)(scores) == engine


def test_stop_rule_per_depth_thresholds_and_the_last_one_beyond():
    rule = stop_rule([0.9, 0.5], 4)
    assert rule([0.85, 1.0, 1.0, 1.0]) == 1  # step 1's path 0.85 < 0.9
    assert rule([0.95, 0.6, 1.0, 1.0]) == 4  # paths 0.95, 0.57, 0.57, 0.57: never below (0.5 from step 2 on)
    assert rule([0.95, 0.5, 1.0, 1.0]) == 2  # step 2's path 0.475 < 0.5
    assert rule([0.95, 0.7, 0.7, 1.0]) == 3  # step 3's path 0.4655 < 0.5 (the last threshold, beyond its depth)
    assert rule([1.0, 1.0, 1.0, 1.0]) == 4  # never below: the ceiling


def test_walk_moves_by_accepted_plus_one_and_charges_each_rounds_depth():
    # one sequence of 6 anchors; anchor n accepts m[n] of what it drafts
    m = [2, 0, 0, 1, 0, 3]
    anchors = {0: [{"m": x, "scores": [0.9, 0.9, 0.9]} for x in m]}
    costs = {0: 10.0, 1: 12.0, 2: 15.0}
    # k = 2: anchor 0 accepts 2 (3 tokens, -> anchor 3), accepts 1 (2 tokens, -> 5), accepts min(3, 2) = 2 (3 tokens)
    tok_ms, per_round, ms_round = walk(anchors, costs, lambda s: 2)
    assert (per_round, ms_round) == (8 / 3, 15.0)
    assert tok_ms == 8 / 45
    # plain: one token per anchor, 6 rounds at 10 ms
    assert walk(anchors, costs, lambda s: 0) == (6 / 60, 1.0, 10.0)
