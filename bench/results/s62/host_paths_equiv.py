"""Stop 62: the sync controller's host arithmetic on lists (adaptive/host_paths.py) against numpy's at a0a7611 (its
adaptive/ package read from git as `adaspec.adaptive_old`), on random inputs: identical admissions, rankings,
top sums and budget decisions; then whole VerifyControllers, old and new, fed the same random stream of rounds
(observe, predicts_gain, admit, served times) in sync and async mode: identical decisions every round.

    python bench/results/s62/host_paths_equiv.py [REV]
"""
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
REV = sys.argv[1] if len(sys.argv) > 1 else "a0a7611"
OLD = Path(tempfile.mkdtemp()) / "adaptive_old"
OLD.mkdir()
names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", REV, "adaspec/adaptive/"],
                       capture_output=True, text=True, check=True).stdout.split()
for n in names:
    if n.endswith(".py"):
        (OLD / Path(n).name).write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"{REV}:{n}"],
                                                       capture_output=True, text=True, check=True).stdout)
import adaspec  # noqa: E402

spec = importlib.util.spec_from_file_location("adaspec.adaptive_old", OLD / "__init__.py",
                                              submodule_search_locations=[str(OLD)])
pkg = importlib.util.module_from_spec(spec)
sys.modules["adaspec.adaptive_old"] = pkg
spec.loader.exec_module(pkg)
import adaspec.adaptive_old.verify_budget as old  # noqa: E402
import adaspec.adaptive_old.verify_controller as oldvc  # noqa: E402
from adaspec.adaptive import verify_budget as new  # noqa: E402
from adaspec.adaptive import verify_controller as newvc  # noqa: E402
from adaspec.adaptive import verify_served as newvs  # noqa: E402
import adaspec.adaptive_old.verify_served as oldvs  # noqa: E402

# the realised-gain rule changed on purpose after a0a7611 (4c067bc, f83137a): the comparison of the host arithmetic
# runs the new controller with the old rule's constants
newvs.REALISED_REQUESTS = newvs.REALISED_MIN_REQUESTS = oldvs.REALISED_REQUESTS
newvs.REALISED_MARGIN = oldvs.REALISED_MARGIN
# ... and stop 63's changes to what is timed and how it prices (943cd61, ca10b47, 7d1613e) and its cold-start
# drafts (c17ead2) are switched off the same way
newvs.COLD_REQUESTS, newvs.SETTLED_ONLY, newvs.POOLED = 0, False, False

rng = np.random.default_rng(0)
costs = {g: 1.0 + 0.07 * g + rng.random() * 0.05 for g in range(1, 140)}
cost = lambda b, g: costs.get(g)  # noqa: E731
pad = lambda b, rows: rows if rows < 140 else None  # noqa: E731


def randP(B, w):
    P = np.cumprod(rng.random((B, w)) ** rng.uniform(0.1, 3), axis=1)
    if rng.random() < 0.2:
        P[rng.integers(0, B), rng.integers(0, w)] = 0.0
    if rng.random() < 0.2:
        P = np.round(P, 1)  # ties
    if rng.random() < 0.05:
        P[0, 0] = np.nan
    return P


n = 0
for t in range(20000):
    B, w = int(rng.integers(1, 17)), int(rng.integers(1, 9))
    P = randP(B, w)
    caps = rng.integers(0, w + 1, size=B) if rng.random() < 0.5 else None
    capl = None if caps is None else caps.tolist()
    tv = float(rng.uniform(0.5, 1)) if rng.random() < .3 else 1.0
    for x in (torch.tensor(P, dtype=torch.float32), P):
        a, b = old.sync_admission(x, B, cost, pad, caps, tv), new.sync_admission(x, B, cost, pad, capl, tv)
        assert tuple(a.__dict__.values()) == tuple(b.__dict__.values()), (a, b)
    assert old.rank_order(P, caps) == new.rank_order(P, capl)
    lagged = [randP(int(rng.integers(1, 17)), w) for _ in range(int(rng.integers(1, 4)))]
    So, Sn = old.expected_top_sums(lagged, B, w), new.expected_top_sums(lagged, B, w)
    assert So.tolist() == list(Sn), (So, Sn)
    mc = int(rng.integers(0, B * w + 1)) if rng.random() < 0.5 else None
    assert old.sync_outcome(lagged, B, B, cost, pad, width=w, max_candidates=mc, token_value=tv) == \
        new.sync_outcome(lagged, B, B, cost, pad, width=w, max_candidates=mc, token_value=tv)
    buckets = {B: sorted(rng.choice(np.arange(B, B * (w + 1) + 1), size=min(5, B * w + 1), replace=False).tolist()
                         + [B * (w + 1)])}
    pc = float(rng.uniform(0.5, 3)) if rng.random() < 0.7 else None
    same = lambda a, b: tuple(a.__dict__.values()) == tuple(b.__dict__.values())  # noqa: E731 (two classes)
    assert same(old.budget_from_lagged(lagged, B, B, cost, buckets, width=w, max_candidates=mc, plain_cost=pc,
                                       token_value=tv),
                new.budget_from_lagged(lagged, B, B, cost, buckets, width=w, max_candidates=mc, plain_cost=pc,
                                       token_value=tv))
    assert same(old.sync_gain_from_lagged(lagged, B, B, cost, pad, width=w, max_candidates=mc, plain_cost=pc,
                                          token_value=tv),
                new.sync_gain_from_lagged(lagged, B, B, cost, pad, width=w, max_candidates=mc, plain_cost=pc,
                                          token_value=tv))
    n += 1
print("functions: identical on", n, "random inputs")

# whole controllers on one random stream each
W = 7
scaled_diff = cap0_rounds = 0
for mode in ("sync", "async"):
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        tbl = {b: {g: 10 + b + 0.6 * g + rng.random() for g in range(b, b * (W + 1) + 1)} for b in (1, 2, 4, 8)}
        kw = dict(mode=mode, lag=1 if mode == "sync" else 2, plain_ms=lambda b, kv: 9.5 + b)
        args = (W, lambda b, g: tbl[b].get(g), lambda B: next((b for b in (1, 2, 4, 8) if b >= B), None),
                {b: sorted(tbl[b]) for b in tbl})
        co, cn = oldvc.VerifyController(*args, **kw), newvc.VerifyController(*args, **kw)
        level = rng.uniform(0.2, 0.95)
        for rid in range(600):
            B = int(rng.integers(1, 9))
            if rng.random() < 0.02:
                level = rng.uniform(0.2, 0.95)
            caps = [int(c) for c in rng.integers(0, W + 1, size=B)]
            go = co.predicts_gain(B, round_id=rid, max_lens=caps) if mode == "sync" else \
                co.plan_budget(B, round_id=rid, max_lens=caps)
            gn = cn.predicts_gain(B, round_id=rid, max_lens=caps) if mode == "sync" else \
                cn.plan_budget(B, round_id=rid, max_lens=caps)
            # c17ead2 on purpose: a sync round none of whose requests may verify a draft token (caps all 0) no
            # longer drafts on the realised-gain opinion alone
            cap0 = mode == "sync" and sum(caps) == 0 and go and not gn
            assert (go == gn or cap0) and (mode == "sync" or same(co.decisions[-1], cn.decisions[-1])), (rid, go, gn)
            cap0_rounds += cap0
            scores = np.clip(rng.normal(level, 0.2, size=(B, W)), 0, 1)
            drafted = rng.random() < 0.8
            if mode == "sync" and drafted:
                Pt = torch.tensor(np.cumprod(scores, axis=1), dtype=torch.float32)
                lo, ln = co.admit(Pt, round_id=rid, max_lens=caps), cn.admit(Pt, round_id=rid, max_lens=caps)
                do, dn = co.decisions[-1], cn.decisions[-1]
                # the stream's confidence ratio scales the round's P in float64 now, in float32 (the tensor's) before
                assert lo == ln and (do.G, do.reason) == (dn.G, dn.reason), (rid, lo, ln, do, dn)
                assert abs(do.predicted - dn.predicted) <= 1e-6 * do.predicted, (do, dn)
                scaled_diff += do.predicted != dn.predicted
                lens = lo
            else:
                lens = caps if drafted else [0] * B
            acc = [int(rng.integers(0, L + 1)) for L in lens]
            ms = 10 + B + 0.5 * sum(lens) + rng.random() * (3 if drafted else 1)
            for c in (co, cn):
                c.observe_round(rid, lens, drafted, ms, True, acc)
                if drafted:
                    c.observe(scores.tolist(), round_id=rid, verify_lens=lens, accepted=acc)
        assert co.g_histogram == cn.g_histogram and co.confidence_ratio() == cn.confidence_ratio()
        print(f"controllers ({mode}, seed {seed}): identical decisions over 600 rounds; G "
              f"{dict(sorted(cn.g_histogram.items()))}; admissions whose predicted throughput differs in the float32 / "
              f"float64 scaling so far: {scaled_diff}; rounds with all caps 0 only the old gate drafted so far: {cap0_rounds}")
