"""Random targets keep the target distribution under the Suffix draft (issue 10, R-B3).

The Suffix draft is deterministic given the committed tokens, so point-mass rejection applies as
for every greedy draft; what is new is that its proposals depend on the sequence's own history
(and that it proposes nothing without a match). Here N sequences share a prompt that repeats
itself, the crafted Markov target of test_verify_distribution.py emits tokens, and the real
`SuffixDrafter` (one slot per sequence, fed only committed tokens) proposes k = 2 tokens per
round; the engine's `sample` and `count_accepted` verify, and rounds without a proposal verify
nothing. The law of the first two emitted tokens must match the exact filtered target law
(chi-square, p = 0.001), and a deliberately broken acceptance rule must be caught by the same test.
"""

from __future__ import annotations

import torch

from adaspec.drafts.base import DraftBatch
from adaspec.drafts.suffix import SuffixDrafter
from adaspec.sampling.sampler import SamplingTensors, filtered_logprobs, sample
from adaspec.sampling.verify import count_accepted
from test_verify_distribution import TARGET, V, _critical, _params, chi_square, exact_two_token_law

K, N = 2, 12000
PROMPT = [0, 1, 2, 3, 0, 4, 2, 1, 0, 5, 2, 1, 0]  # ends with START = 0 after "2 1", which was seen before


def suffix_two_tokens(params, broken: bool = False, seed: int = 0) -> tuple[torch.Tensor, int]:
    """[N, 2] first emitted tokens, and how many draft tokens were verified in all."""
    g = torch.Generator().manual_seed(seed)
    d = SuffixDrafter()
    d.allocate(N, 64)
    seqs = [list(PROMPT) for _ in range(N)]
    emitted = [[] for _ in range(N)]
    fed = [0] * N  # tokens of each sequence already given to the drafter
    active = list(range(N))
    verified = 0
    while active:
        toks = [seqs[i][fed[i] - 1 if fed[i] else 0:] for i in active]
        starts = [fed[i] - 1 if fed[i] else 0 for i in active]
        nxt = torch.tensor([t for tt in toks for t in tt[1:]])
        batch = DraftBatch(active, starts, [len(t) - 1 for t in toks], torch.zeros(len(nxt), 1), nxt, K,
                           tokens_host=toks)
        out = d.draft(batch)
        for i in active:
            fed[i] = len(seqs[i])
        lens = torch.tensor(out.lengths)
        prev = torch.tensor([seqs[i][-1] for i in active])
        rows = torch.cat([prev[:, None], out.tokens], dim=1)  # target reads [t_n, d1, d2]
        logits = TARGET[rows.reshape(-1)]
        t = SamplingTensors.from_params([params] * len(logits))
        y = sample(logits, t, default_generator=g).view(-1, K + 1)
        if broken:  # accept while the target merely allows the draft token
            allowed = filtered_logprobs(logits, t).view(-1, K + 1, V).gather(2, out.tokens[:, :, None]).squeeze(2) > -1e9
            allowed &= torch.arange(K)[None, :] < lens[:, None]
            m = allowed.long().cumprod(1).sum(1)
        else:
            m = count_accepted(out.tokens, y, lens)
        verified += int(lens.sum())
        for b, (i, mi) in enumerate(zip(active, m.tolist())):
            new = out.tokens[b, :mi].tolist() + [int(y[b, mi])]
            emitted[i] += new
            seqs[i] += new
        active = [i for i in active if len(emitted[i]) < 2]
    return torch.tensor([e[:2] for e in emitted]), verified


def test_suffix_speculation_matches_target_law():
    params = _params()
    samples, verified = suffix_two_tokens(params)
    assert verified > N  # every first round proposes (the prompt repeats "2 1 0"), later ones vary
    stat, dof = chi_square(samples, exact_two_token_law(params))
    assert stat < _critical(dof), f"chi2={stat:.1f} dof={dof}"


def test_broken_acceptance_rule_is_detected_with_suffix_drafts():
    params = _params()
    samples, _ = suffix_two_tokens(params, broken=True)
    stat, dof = chi_square(samples, exact_two_token_law(params))
    assert stat > _critical(dof), f"broken rule not detected: chi2={stat:.1f} dof={dof}"
