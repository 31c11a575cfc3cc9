"""Sampler filters and sampling (R-I1), and the row-wise semantics speculative verify relies
on (R-B3: each verified row is sampled from the request's filtered target distribution)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from adaspec.sampling.sampler import SamplingTensors, filtered_logprobs, sample
from adaspec.sampling_params import SamplingParams

# chi-square critical values at p = 0.001, by degrees of freedom (scipy.stats.chi2.ppf(0.999, dof))
CHI2_CRIT_0_001 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458,
                   7: 24.322, 8: 26.124, 9: 27.877, 10: 29.588, 11: 31.264}


def P(**kw) -> SamplingParams:
    return SamplingParams(**kw)


def logits_of(probs: list[float]) -> torch.Tensor:
    return torch.tensor([math.log(p) for p in probs], dtype=torch.float32)


def survivors(logits: torch.Tensor, params: SamplingParams) -> set[int]:
    t = SamplingTensors.from_params([params], "cpu")
    lp = filtered_logprobs(logits.unsqueeze(0), t)[0]
    return {i for i, v in enumerate(lp.tolist()) if v != float("-inf")}


def reference_dist(logits: list[float], p: SamplingParams) -> list[float]:
    """Obvious float64 re-statement of the documented filter order (R-I1)."""
    V = len(logits)
    if p.temperature == 0:
        best = max(range(V), key=lambda i: (logits[i], -i))
        return [1.0 if i == best else 0.0 for i in range(V)]
    x = [l / p.temperature for l in logits]
    keep = set(range(V))
    if p.top_k > 0:
        kth = sorted(x, reverse=True)[min(p.top_k, V) - 1]
        keep = {i for i in keep if x[i] >= kth}
    if p.top_p < 1.0:
        z = sum(math.exp(x[j]) for j in keep)
        prob = {j: math.exp(x[j]) / z for j in keep}
        keep = {i for i in keep if sum(prob[j] for j in keep if x[j] > x[i]) < p.top_p}
    if p.min_p > 0.0:
        xm = max(x)
        keep = {i for i in keep if math.exp(x[i] - xm) >= p.min_p}
    z = sum(math.exp(x[j]) for j in keep)
    return [math.exp(x[i]) / z if i in keep else 0.0 for i in range(V)]


def chi_square(counts: torch.Tensor, expected_probs: list[float], n: int) -> tuple[float, int]:
    """Statistic over the support of expected_probs; tokens outside it must never be drawn."""
    stat, dof = 0.0, -1
    for c, q in zip(counts.tolist(), expected_probs):
        if q == 0.0:
            assert c == 0, "a filtered-out token was sampled"
            continue
        stat += (c - n * q) ** 2 / (n * q)
        dof += 1
    return stat, dof


# ------------------------------------------------------------------------------------ top-k
def test_top_k_keeps_k_largest():
    """R-I1: top_k keeps the k most likely tokens; 0 and -1 disable it."""
    l = torch.tensor([1.0, 5.0, 3.0, 4.0, 2.0])
    assert survivors(l, P(top_k=1)) == {1}
    assert survivors(l, P(top_k=2)) == {1, 3}
    assert survivors(l, P(top_k=3)) == {1, 2, 3}
    assert survivors(l, P(top_k=5)) == set(range(5))
    assert survivors(l, P(top_k=50)) == set(range(5))
    assert survivors(l, P(top_k=0)) == set(range(5))
    assert survivors(l, P(top_k=-1)) == set(range(5))


def test_top_k_ties_with_kth_token_all_survive():
    """R-I1: ties with the k-th logit are kept together (order-independent result)."""
    l = torch.tensor([5.0, 4.0, 4.0, 1.0])
    assert survivors(l, P(top_k=2)) == {0, 1, 2}
    assert survivors(l, P(top_k=1)) == {0}


def test_top_k_renormalises():
    """R-I1: survivors are renormalised: probabilities are softmax over the kept logits."""
    l = logits_of([0.4, 0.3, 0.2, 0.1])
    t = SamplingTensors.from_params([P(top_k=2)], "cpu")
    got = filtered_logprobs(l.unsqueeze(0), t)[0].exp()
    assert torch.allclose(got, torch.tensor([4 / 7, 3 / 7, 0.0, 0.0]), atol=1e-6)


# ------------------------------------------------------------------------------------ top-p
@pytest.mark.parametrize(
    "top_p, expected",
    [
        (1e-6, {0}),  # always keep the top token
        (0.49, {0}),
        (0.51, {0, 1}),  # mass before token 1 is 0.5 < 0.51
        (0.79, {0, 1}),
        (0.81, {0, 1, 2}),
        (0.96, {0, 1, 2, 3}),
        (1.0, {0, 1, 2, 3}),
    ],
)
def test_top_p_boundaries(top_p, expected):
    """R-I1: top-p keeps the smallest most-likely set whose mass reaches top_p; a token
    survives iff the mass strictly above it is < top_p."""
    l = logits_of([0.5, 0.3, 0.15, 0.05])
    assert survivors(l, P(top_p=top_p)) == expected


def test_top_p_exact_boundary_stops_when_mass_is_reached():
    """R-I1: when the kept mass equals top_p exactly, no further token is added (dyadic
    probabilities are exact in float32, so this pins `<` rather than `<=`)."""
    l = logits_of([0.5, 0.375, 0.125])
    assert survivors(l, P(top_p=0.5)) == {0}
    assert survivors(l, P(top_p=0.875)) == {0, 1}


def test_top_p_ties_survive_together():
    """R-I1: tied tokens at the nucleus boundary are kept or dropped as a group."""
    l = logits_of([0.4, 0.2, 0.2, 0.2])
    assert survivors(l, P(top_p=0.39)) == {0}
    assert survivors(l, P(top_p=0.41)) == {0, 1, 2, 3}  # one tie needed -> all three
    # ties at the top: all of them survive even for a tiny top_p
    assert survivors(logits_of([0.3, 0.3, 0.2, 0.2]), P(top_p=0.01)) == {0, 1}


def test_top_p_renormalises():
    """R-I1: top-p survivors are renormalised."""
    l = logits_of([0.5, 0.3, 0.15, 0.05])
    t = SamplingTensors.from_params([P(top_p=0.6)], "cpu")
    got = filtered_logprobs(l.unsqueeze(0), t)[0].exp()
    assert torch.allclose(got, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=1e-6)


def test_top_p_uses_temperature_scaled_distribution():
    """R-I1: top-p is computed after temperature scaling."""
    l = logits_of([0.6, 0.3, 0.1])
    # T=1: mass before token 1 is 0.6 < 0.7.  T=0.5: probs ~ [0.78, 0.20, 0.02].
    assert survivors(l, P(top_p=0.7, temperature=1.0)) == {0, 1}
    assert survivors(l, P(top_p=0.7, temperature=0.5)) == {0}


def test_top_p_is_computed_after_top_k():
    """R-I1: top-p is applied to the top-k-filtered (renormalised) distribution."""
    l = logits_of([0.4, 0.3, 0.2, 0.1])
    # top-p alone: 0.4 < 0.55 keeps token 1.  After top_k=2 the probs are [4/7, 3/7]:
    # 0.571 >= 0.55, so only token 0 survives (top-p-then-top-k would give {0, 1}).
    assert survivors(l, P(top_p=0.55)) == {0, 1}
    assert survivors(l, P(top_k=2, top_p=0.55)) == {0}


# ------------------------------------------------------------------------------------ min-p
def test_min_p_relative_to_max():
    """R-I1: min-p keeps tokens with p >= min_p * p_max."""
    l = logits_of([0.5, 0.3, 0.15, 0.05])
    assert survivors(l, P(min_p=0.0)) == {0, 1, 2, 3}
    assert survivors(l, P(min_p=0.09)) == {0, 1, 2, 3}  # 0.05 >= 0.045
    assert survivors(l, P(min_p=0.2)) == {0, 1, 2}  # threshold 0.1
    assert survivors(l, P(min_p=0.35)) == {0, 1}  # threshold 0.175
    assert survivors(l, P(min_p=1.0)) == {0}


def test_min_p_after_temperature_and_after_top_p():
    """R-I1: min-p uses the temperature-scaled distribution after top-k/top-p."""
    l = logits_of([0.5, 0.3, 0.2])
    # T=1 ratios [1, .6, .4]; T=0.5 ratios [1, .36, .16]
    assert survivors(l, P(min_p=0.3)) == {0, 1, 2}
    assert survivors(l, P(min_p=0.3, temperature=0.5)) == {0, 1}
    # top-p removes token 2 first; min-p's threshold (ratio to the max) is unchanged
    assert survivors(l, P(top_p=0.7, min_p=0.5)) == {0, 1}
    assert survivors(l, P(top_p=0.7, min_p=0.7)) == {0}


def test_filters_match_reference_on_random_rows():
    """R-I1 / R-B3: the vectorised filters equal an obvious per-row re-statement of the
    documented order, for many random parameter mixes in one batch (ties included)."""
    rng = random.Random(0)
    V, R = 12, 300
    params, rows = [], []
    for _ in range(R):
        params.append(P(
            temperature=rng.choice([0.0, 0.3, 0.7, 1.0, 1.6]),
            top_k=rng.choice([0, -1, 1, 2, 3, 5, 40]),
            top_p=rng.choice([1.0, 0.2, 0.5, 0.8, 0.95]),
            min_p=rng.choice([0.0, 0.0, 0.05, 0.3]),
        ))
        rows.append([round(rng.gauss(0, 2) * 2) / 2 for _ in range(V)])  # steps of 0.5: ties
    logits = torch.tensor(rows, dtype=torch.float32)
    got = filtered_logprobs(logits, SamplingTensors.from_params(params, "cpu")).exp()
    for i in range(R):
        ref = torch.tensor(reference_dist(rows[i], params[i]), dtype=torch.float32)
        assert torch.equal(got[i] > 0, ref > 0), (i, params[i], rows[i])
        assert torch.allclose(got[i], ref, atol=1e-5), (i, params[i])


# ------------------------------------------------------------------------------------ greedy
def test_greedy_rows_ignore_filters():
    """R-B2/R-I1: temperature 0 is the argmax of the raw logits whatever the filters."""
    l = torch.tensor([[0.1, 3.0, 2.9, -1.0]])
    for p in [P(temperature=0), P(temperature=0, top_k=3, top_p=0.1, min_p=0.9)]:
        t = SamplingTensors.from_params([p], "cpu")
        assert t.all_greedy
        lp = filtered_logprobs(l, t)
        assert lp[0].tolist() == [float("-inf"), 0.0, float("-inf"), float("-inf")]
        assert sample(l, t).tolist() == [1]


def test_mixed_greedy_and_random_rows_in_one_batch():
    """R-B3: greedy and random requests share a batch; each row keeps its own semantics."""
    V, n = 6, 20000
    probs = [0.05, 0.12, 0.3, 0.25, 0.2, 0.08]
    row = logits_of(probs)
    pg, pr = P(temperature=0, top_k=2), P(temperature=1.0, top_k=4)
    params = [pg if i % 2 == 0 else pr for i in range(2 * n)]
    t = SamplingTensors.from_params(params, "cpu")
    assert not t.all_greedy and t.any_top_k and not t.any_top_p
    logits = row.expand(2 * n, V).contiguous()
    tok = sample(logits, t, default_generator=torch.Generator().manual_seed(1))
    assert tok.dtype == torch.int64 and tok.shape == (2 * n,)
    assert (tok[0::2] == 2).all()
    counts = torch.bincount(tok[1::2], minlength=V)
    stat, dof = chi_square(counts, reference_dist(row.tolist(), pr), n)
    assert dof == 3 and stat < CHI2_CRIT_0_001[dof]
    # the greedy rows' logprobs are one-hot, the random rows' are the filtered distribution
    lp = filtered_logprobs(logits[:2], SamplingTensors.from_params(params[:2], "cpu"))
    assert lp[0].exp().tolist() == [0, 0, 1, 0, 0, 0]
    assert torch.allclose(lp[1].exp(), torch.tensor(reference_dist(row.tolist(), pr)), atol=1e-6)


# ------------------------------------------------------------------------------------ sampling
@pytest.mark.parametrize(
    "params",
    [
        P(temperature=1.0),
        P(temperature=0.7, top_k=6, top_p=0.9, min_p=0.05),
        P(temperature=1.3, top_p=0.8),
        P(temperature=0.5, min_p=0.1),
    ],
)
def test_sample_frequencies_match_filtered_distribution(params):
    """R-I1 / R-B3: sampled frequencies follow the filtered target distribution
    (chi-square at p=0.001, fixed seed), and filtered-out tokens are never drawn."""
    n = 40000
    probs = [0.22, 0.18, 0.15, 0.12, 0.1, 0.09, 0.08, 0.06]
    row = logits_of(probs)
    t = SamplingTensors.from_params([params] * n, "cpu")
    tok = sample(row.expand(n, -1), t, default_generator=torch.Generator().manual_seed(123))
    counts = torch.bincount(tok, minlength=len(probs))
    expected = reference_dist(row.tolist(), params)
    stat, dof = chi_square(counts, expected, n)
    assert stat < CHI2_CRIT_0_001[dof], (stat, dof)
    # the test has power: the unfiltered distribution is clearly rejected (unless identical)
    if expected != reference_dist(row.tolist(), P()):
        raw = torch.tensor(probs) * n
        assert (((counts - raw) ** 2) / raw).sum().item() > 10 * CHI2_CRIT_0_001[7]


def test_sample_uses_global_rng_without_generators():
    """R-I1: without generators the global RNG drives sampling (torch.manual_seed reproduces)."""
    l = torch.zeros(64, 10)
    t = SamplingTensors.from_params([P()] * 64, "cpu")
    torch.manual_seed(5)
    a = sample(l, t)
    torch.manual_seed(5)
    b = sample(l, t)
    assert torch.equal(a, b) and len(set(a.tolist())) > 1


def test_per_row_generator_is_reproducible_regardless_of_batch():
    """R-I1 (per-request seed without speculation): a row with its own generator samples the
    same tokens whatever the other rows are and whatever the global RNG state."""
    V = 8
    target = torch.randn(V, generator=torch.Generator().manual_seed(0))
    other = torch.randn(3, V, generator=torch.Generator().manual_seed(1))
    pt, po = P(temperature=1.0, top_p=0.95), P(temperature=0.8, top_k=3)

    def run_alone(seed):
        t = SamplingTensors.from_params([pt], "cpu")
        return sample(target[None], t, [torch.Generator().manual_seed(seed)])[0].item()

    def run_in_batch(seed):
        logits = torch.stack([other[0], target, other[1], other[2]])
        t = SamplingTensors.from_params([po, pt, P(temperature=0), po], "cpu")
        gens = [None, torch.Generator().manual_seed(seed), None, torch.Generator().manual_seed(99)]
        torch.manual_seed(seed + 1000)  # unrelated global RNG state
        return sample(logits, t, gens)[1].item()

    alone = [run_alone(s) for s in range(60)]
    batched = [run_in_batch(s) for s in range(60)]
    assert alone == batched
    assert len(set(alone)) > 2  # really random across seeds


def test_generator_shared_by_rows_of_one_request_is_deterministic():
    """R-B3: a request may contribute several rows; one generator can drive all of them."""
    l = torch.zeros(5, 16)
    t = SamplingTensors.from_params([P()] * 5, "cpu")
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a = sample(l, t, [g1] * 5)
    b = sample(l, t, [g2] * 5)
    assert torch.equal(a, b) and len(set(a.tolist())) > 1


def test_select_rows_expands_requests_to_verify_rows():
    """R-B3: rows are just rows: request params expanded per verify row give the same
    tensors as listing the params per row."""
    reqs = [P(temperature=0.5, top_k=3), P(temperature=0), P(top_p=0.7, min_p=0.1)]
    index = torch.tensor([0, 0, 0, 1, 2, 2])
    logits = torch.randn(6, 10, generator=torch.Generator().manual_seed(0))
    a = filtered_logprobs(logits, SamplingTensors.from_params(reqs, "cpu").select_rows(index))
    b = filtered_logprobs(logits, SamplingTensors.from_params([reqs[i] for i in index], "cpu"))
    assert torch.equal(a, b)


def test_flags_skip_disabled_filters_and_ignore_greedy_rows():
    """R-I1: python-level flags reflect only random rows."""
    t = SamplingTensors.from_params([P(temperature=0, top_k=5, top_p=0.5, min_p=0.5), P()], "cpu")
    assert (t.all_greedy, t.any_top_k, t.any_top_p, t.any_min_p) == (False, False, False, False)
    t = SamplingTensors.from_params([P(top_k=-1)], "cpu")
    assert t.top_k.tolist() == [0] and not t.any_top_k
    assert t.temperature.dtype == torch.float32 and t.top_k.dtype == torch.int64


def test_low_precision_logits_and_empty_batch():
    """R-A4: bf16 logits work (computed in fp32); zero rows is a no-op."""
    l = torch.tensor([[0.0, 2.0, 1.0]], dtype=torch.bfloat16)
    t = SamplingTensors.from_params([P(top_k=1)], "cpu")
    assert sample(l, t).tolist() == [1]
    assert filtered_logprobs(l, t).dtype == torch.float32
    empty = SamplingTensors.from_params([], "cpu")
    assert sample(torch.zeros(0, 5), empty).shape == (0,)


def test_first_argmax_is_argmax_including_ties():
    """sample's greedy rows use max(dim=-1).indices (faster on CPU): the same first index on ties."""
    from adaspec.sampling.sampler import first_argmax

    g = torch.Generator().manual_seed(0)
    for n in (5, 300, 49152):
        ties = torch.randint(0, 3, (32, n), generator=g).float()
        ties[:, :2] = float("-inf")
        dense = torch.randn(32, n, generator=g)
        for x in (ties, dense):
            assert torch.equal(first_argmax(x), x.argmax(dim=-1))



def test_exponential_noise_is_unit_exponential_and_reproducible():
    """The race's noise (issue 13: rand + log1p instead of Tensor.exponential_): E >= 0, finite,
    mean 1 and P(E > 1) = 1/e within sampling error, and a function of the generator's seed alone."""
    from adaspec.sampling.sampler import exponential_noise

    e = exponential_noise((200_000,), torch.Generator().manual_seed(5), "cpu")
    assert e.dtype == torch.float32 and bool(torch.isfinite(e).all()) and float(e.min()) >= 0.0
    assert abs(float(e.mean()) - 1.0) < 0.01 and abs(float((e > 1).float().mean()) - math.exp(-1)) < 0.005
    again = exponential_noise((200_000,), torch.Generator().manual_seed(5), "cpu")
    assert torch.equal(e, again)


def _race_reference(probs, u):
    """The exponential race over every token, as the accelerators' path computes it."""
    from adaspec.sampling.sampler import _noise

    return (probs / _noise(u)).argmax(dim=-1)


def test_the_cpu_race_picks_the_full_races_winner():
    """sampler.race computes the logarithm only for tokens whose bound p / U can reach the winner: the same
    tokens as the race over every token, on dense rows, rows with filtered (zero) tokens, uniforms at 0 and
    below float32's smallest normal, and exact ties (the first index wins)."""
    from adaspec.sampling.sampler import race

    g = torch.Generator().manual_seed(11)
    for V, T in ((7, 1.0), (300, 0.5), (49152, 0.8), (49152, 3.0)):
        logits = torch.randn(16, V, generator=g) * 3
        logits[:4, : V // 2] = float("-inf")  # filtered tokens: probability 0
        probs = (logits / T).softmax(dim=-1)
        for _ in range(10):
            u = torch.rand(16, V, dtype=torch.float64, generator=g)
            u[0, :3] = 0.0
            u[1, 1] = 1e-300
            u[2, -1] = 1e-40
            assert torch.equal(race(probs, u), _race_reference(probs, u))
    probs = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.1, 0.4, 0.1, 0.4]])
    u = torch.tensor([[0.5, 0.3, 0.3, 0.9], [0.2, 0.2, 0.7, 0.2]], dtype=torch.float64)
    assert race(probs, u).tolist() == [1, 1] == _race_reference(probs, u).tolist()
    assert race(torch.zeros(0, 5), torch.zeros(0, 5, dtype=torch.float64)).shape == (0,)


def test_a_rows_race_winner_does_not_depend_on_the_other_rows():
    """The candidates' logarithms are computed one at a time (sampler.race), so a row's token is a function
    of its own probabilities and uniforms, whatever shares the call (R-B5)."""
    from adaspec.sampling.sampler import race

    g = torch.Generator().manual_seed(12)
    probs = (torch.randn(9, 1000, generator=g) * 2).softmax(dim=-1)
    u = torch.rand(9, 1000, dtype=torch.float64, generator=g)
    together = race(probs, u).tolist()
    assert together == [race(probs[i:i + 1], u[i:i + 1]).item() for i in range(9)]
