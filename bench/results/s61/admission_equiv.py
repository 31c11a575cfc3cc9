"""Stop 61: the admission, ranking and confidence counts at 50a89fa (read from git) against the working tree's, on
20000 random inputs (ties, zeros, caps, token values): identical admissions and orders; counts within 1e-12.

    python bench/results/s61/admission_equiv.py
"""
import sys, importlib.util, random
import numpy as np, torch
import subprocess, tempfile
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
OLD = Path(tempfile.mkdtemp())
for f in ("verify_budget", "draft_calibration"):
    (OLD / f"{f}.py").write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"50a89fa:adaspec/adaptive/{f}.py"],
                                               capture_output=True, text=True, check=True).stdout)
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    m.__package__ = "adaspec.adaptive"; sys.modules[name] = m; spec.loader.exec_module(m); return m
old = load("adaspec.adaptive.vb_old", OLD / "verify_budget.py")
oldc = load("adaspec.adaptive.dc_old", OLD / "draft_calibration.py")
from adaspec.adaptive import verify_budget as new, draft_calibration as newc
rng = np.random.default_rng(0)
costs = {g: 1.0 + 0.07 * g + rng.random() * 0.05 for g in range(1, 80)}
cost = lambda b, g: costs.get(g)
pad = lambda b, rows: rows if rows < 80 else None
n = diff = 0
for t in range(20000):
    B = int(rng.integers(1, 9)); w = int(rng.integers(1, 9))
    P = np.cumprod(rng.random((B, w)) ** rng.uniform(0.1, 3), axis=1)
    if rng.random() < 0.2: P[rng.integers(0, B), rng.integers(0, w)] = 0.0
    if rng.random() < 0.2: P = np.round(P, 1)  # ties
    caps = rng.integers(0, w + 1, size=B) if rng.random() < 0.5 else None
    tv = float(rng.uniform(0.5, 1)) if rng.random() < .3 else 1.0
    _a, _b = old.sync_admission(torch.tensor(P), B, cost, pad, caps, tv), new.sync_admission(torch.tensor(P), B, cost, pad, caps, tv)
    if tuple(_a.__dict__.values()) != tuple(_b.__dict__.values()):
        print([x == y for x, y in zip(_a.__dict__.values(), _b.__dict__.values())], repr(_a.predicted), repr(_b.predicted), _a.predicted == _b.predicted); break
    a = old.sync_admission(P, B, cost, pad, caps, tv); b = new.sync_admission(P, B, cost, pad, caps, tv)
    assert tuple(a.__dict__.values()) == tuple(b.__dict__.values()), (a, b)
    assert old.rank_order(P, caps) == new.rank_order(P, caps)
    lens = rng.integers(0, w + 1, size=B).tolist(); acc = [int(rng.integers(0, L + 1)) for L in lens]
    x, y = oldc.ConfidenceRatio.counts(P, lens, acc), newc.ConfidenceRatio.counts(P, lens, acc)
    assert x[0] == y[0] and x[2] == y[2] and abs(x[1] - y[1]) <= 1e-12 * max(1, x[1]), (x, y)
    diff += x[1] != y[1]; n += 1
print("ok", n, "counts bitwise-different:", diff)
