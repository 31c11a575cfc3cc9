"""Losslessness of adaptive verify budgets (R-D3, R-D4): PRIOR_ART §5.3's counter-example as a distribution test.

One request (R = 1), width gamma = 2, a *probabilistic* draft p_d = (0.5, 0.5) and target
p_t = (0.7, 0.3) over two tokens, standard rejection sampling (accept x w.p. min(1, p_t/p_d),
residual norm(max(0, p_t - p_d)) on rejection, bonus from p_t). Confidences: c_1 = 0.8 and
c_2 = 0.9 if the drafted x_1 is token 0, else 0 (c_2 reads x_1's embedding, as DSpark's Markov
head does). SPS(1, 2, 3) = 1, 0.5, 0.45 target steps per unit time, cost = 1 / SPS.

- A retrospective argmax over all prefixes verifies x_1 exactly when x_1 = 0 (theta_2 = 1.134 >
  theta_0 = 1; otherwise theta_2 = 0.81): the first token becomes (0.85, 0.15), not p_t.
- `sync_admission` stops at theta_1 = 0.9 < theta_0 = 1 before c_2 is ever looked at.
- The asynchronous budget is chosen from round n - 2's scores, independent of the current x_1;
  the current scores only rank candidates inside it. Here it verifies both drafts in about half
  of the rounds and is still exact.
adaspec's drafts are greedy (R-B4), where even the forbidden variant would be exact; the test uses a
probabilistic draft precisely because it is the case that exposes a non-anticipation bug.
"""

from __future__ import annotations

import numpy as np
import torch

from adaspec.adaptive.scoring import confident_lengths, path_probabilities
from adaspec.adaptive.verify_budget import allocate_in_budget, budget_from_lagged, sync_admission
from adaspec.adaptive.verify_controller import VerifyController
from adaspec.geometry import first_covering

P_T = np.array([0.7, 0.3])
P_D = np.array([0.5, 0.5])
RESIDUAL = np.maximum(P_T - P_D, 0.0) / np.maximum(P_T - P_D, 0.0).sum()
SPS = {1: 1.0, 2: 0.5, 3: 0.45}
BUCKETS = {1: [1, 2, 3]}
N_ROUNDS = 6000
CHI2_1DOF_P001 = 10.83


def cost_ms(bcap, G):
    return 1.0 / SPS[G] if bcap == 1 and G in SPS else None


def pad_rows(bcap, rows):
    return first_covering(BUCKETS[bcap], rows)


def draft(rng):
    """x_1 ~ p_d and the confidences the draft reports for it."""
    x1 = int(rng.random() < P_D[1])
    c2 = 0.9 if x1 == 0 else 0.0
    return x1, torch.tensor([[0.8, c2]])


def first_emitted(rng, L: int, x1: int) -> int:
    """Rejection sampling of the first emitted token when the target verifies L drafts."""
    if L == 0:
        return int(rng.random() < P_T[1])  # the bonus token, sampled from p_t
    if rng.random() < min(1.0, P_T[x1] / P_D[x1]):
        return x1
    return int(rng.random() < RESIDUAL[1])


def chi2(tokens) -> float:
    counts = np.bincount(np.asarray(tokens), minlength=2)
    expected = P_T * len(tokens)
    return float(((counts - expected) ** 2 / expected).sum())


def run(choose_len, seed=0):
    rng = np.random.default_rng(seed)
    tokens, lens = [], []
    for n in range(N_ROUNDS):
        x1, scores = draft(rng)
        L = choose_len(n, scores)
        lens.append(L)
        tokens.append(first_emitted(rng, L, x1))
    return tokens, lens


def retrospective_argmax(n, scores):
    """The forbidden variant: the budget argmax computed from the *current* round's scores."""
    P = path_probabilities(scores)
    G = budget_from_lagged([P.numpy()], 1, 1, cost_ms, BUCKETS).G
    return int(allocate_in_budget(P, G)[0])


def test_retrospective_argmax_is_detected():
    """R-D3: a retrospective argmax lets x_1's own value decide whether it is verified -> (0.85, 0.15)."""
    tokens, lens = run(retrospective_argmax)
    assert set(lens) == {0, 2}
    assert abs(np.mean(np.asarray(tokens) == 0) - 0.85) < 0.02
    assert chi2(tokens) > 10 * CHI2_1DOF_P001


def test_sync_admission_with_early_stop_is_lossless():
    """R-D3a: Algorithm 1 with early stop reproduces p_t."""
    def choose(n, scores):
        return sync_admission(path_probabilities(scores), 1, cost_ms, pad_rows).verify_lens[0]

    tokens, lens = run(choose)
    assert set(lens) == {0}  # theta_1 = 1.8 * 0.5 = 0.9 < theta_0 = 1: stops before c_2 matters
    assert chi2(tokens) < CHI2_1DOF_P001


def test_async_budget_from_lagged_feedback_is_lossless():
    """R-D3b / R-D4: budget from round n - 2's scores, current scores only rank inside it."""
    ctrl = VerifyController(2, cost_ms, lambda B: 1, BUCKETS, pad_rows, mode="async", lag=2, budget_window=1)

    def choose(n, scores):
        G = ctrl.plan_budget(1, round_id=n)
        L = int(ctrl.allocate(path_probabilities(scores), G)[0])
        ctrl.observe(scores.numpy(), round_id=n)  # completes after the next round is planned
        return L

    tokens, lens = run(choose)
    frac_full = np.mean(np.asarray(lens) == 2)
    assert set(lens) == {0, 2} and 0.4 < frac_full < 0.6  # the budget really varies
    assert chi2(tokens) < CHI2_1DOF_P001


# ---- the draft step's confidence stop (policy.confidence_stop): two emitted tokens ------------------------------
CHI2_3DOF_P001 = 16.27


def two_tokens(rng, verify_len) -> tuple[int, int]:
    """The first two tokens emitted from a round with drafts x_1, x_2 ~ p_d (independent; the target is p_t at both
    positions), scores c_1 = 0.9 if x_1 = 0 else 0.2 and c_2 = 0.9 if x_2 = 0 else 0.2 (each a function of its own
    token, as MTP's probability of its choice is), the target verifying `verify_len(scores)` drafts. After a
    rejection, or past the verified drafts, the next token is the target's own sample (bonus or next round)."""
    x = [int(rng.random() < P_D[1]) for _ in range(2)]
    scores = torch.tensor([[0.9 if x[0] == 0 else 0.2, 0.9 if x[1] == 0 else 0.2]])
    L, out = verify_len(scores), []
    for j in range(2):
        if j >= L:
            out.append(int(rng.random() < P_T[1]))
            L = 0  # the rest of the round is the target's own sampling
        elif rng.random() < min(1.0, P_T[x[j]] / P_D[x[j]]):
            out.append(x[j])
        else:
            out.append(int(rng.random() < RESIDUAL[1]))
            L = 0  # rejected: the round ends, the next token comes from the next round
    return out[0], out[1]


def joint_chi2(pairs) -> float:
    counts = np.bincount([2 * a + b for a, b in pairs], minlength=4)
    expected = np.outer(P_T, P_T).ravel() * len(pairs)
    return float(((counts - expected) ** 2 / expected).sum())


def test_confidence_stop_keeps_the_target_distribution():
    """The draft step's confidence stop verifies up to and including the first draft whose path probability is below
    the threshold (adaptive/scoring.confident_lengths): whether x_j is verified depends on the scores of x_1..x_(j-1)
    only, never on x_j's own, so the joint distribution of the emitted tokens is p_t x p_t. The variant that verifies
    only the drafts whose own path probability clears the threshold lets x_2's value decide whether x_2 is verified,
    and the test sees it."""
    rng = np.random.default_rng(5)
    lens = []

    def stop(scores):
        lens.append(confident_lengths(scores, 0.5)[0])
        return lens[-1]

    pairs = [two_tokens(rng, stop) for _ in range(N_ROUNDS)]
    assert set(lens) == {1, 2}  # the stop really varies with the first draft
    assert joint_chi2(pairs) < CHI2_3DOF_P001

    def own_score_decides(scores):
        return int((path_probabilities(scores) >= 0.5).sum())

    rng = np.random.default_rng(6)
    biased = [two_tokens(rng, own_score_decides) for _ in range(N_ROUNDS)]
    assert joint_chi2(biased) > 10 * CHI2_3DOF_P001
