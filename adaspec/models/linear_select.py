"""Resolve `--linear_backend` at load: `auto` measures the model's own linear shapes (issue 14).

`select_backend` runs before the model is packed. For `auto` (CPU, float32) each candidate
(fp32, fp16w, bf16; unavailable ones are skipped with the reason) is timed on a sample of the
model's own weights, at one row and at a verify-sized row count: linear layers in model order
until about 16M parameters are sampled (more bytes than this CPU's L3 holds in fp16, so the
weights stream from memory as in a real forward), every other shape once, and matrices over 4M
parameters (the LM head) on two row slices, scaled up. Per-call times are the minimum over
repeats (robust to other jobs on the core); the estimate of one forward's linear time is the sum
over all layers of their shape's time. Each candidate is also checked for row independence on
every shape (linear.row_independent).

The choice, in this order: only candidates whose rows do not depend on the row count, if any
(their linears give a verify row the bits of a plain-decode row, R-B2); among those the lowest sum of
the two estimates; bf16 only where it is faster than every other one at both row counts by at
least 10% (`BF16_MARGIN`: it is the least accurate of the three). The
whole measurement takes well under 2 s on the bundled model; packed sample layers of the chosen
backend are reused for the model.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn
import torch.nn.functional as F

from ..config import ConfigError, check_linear_backend
from .linear import implementation, native_backend, pack_linear, row_independent, unavailable_reason

CANDIDATES = ("fp32", "fp16w", "bf16")
# bf16 rounds weights and activations to 8 bits of mantissa (fp16w: weights to 11): it is chosen only
# when it is faster than every other candidate by this factor at both row counts. With its weights
# packed for oneDNN (AMX Xeon), bf16 and fp16w are within a few percent of each other at one row, and
# a bare "faster" let the default flip between the two from one start to the next under load.
BF16_MARGIN = 1.10
SAMPLE_PARAMS = 16_000_000
SLICE_PARAMS = 4_000_000
REPEATS = 5


@dataclass
class BackendChoice:
    requested: str
    backend: str
    implementation: str
    reason: str
    rows: tuple[int, ...] = ()
    est_ms: dict[str, list[float]] = field(default_factory=dict)  # backend -> ms per forward at each rows
    row_independent: dict[str, bool | None] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    sampled_layers: int = 0
    seconds: float = 0.0
    kept_fp32: list[str] = field(default_factory=list)

    def describe(self) -> str:
        how = "auto" if self.requested == "auto" else f"--linear_backend={self.requested}"
        parts = [f"[adaspec] linear backend: {self.backend} ({how}; {self.implementation}; {self.reason})"]
        if self.est_ms:
            head = " / ".join(f"M={m}" for m in self.rows)
            cells = []
            for b, ms in self.est_ms.items():
                ri = {True: "rows independent of M", False: "rows depend on M", None: "?"}[self.row_independent.get(b)]
                cells.append(f"{b} {' / '.join(f'{t:.3g}' for t in ms)} [{ri}]")
            parts.append(f"  measured in {self.seconds:.2f} s on {self.sampled_layers} sampled weights; "
                         f"est. linear ms per target forward at {head}: " + ", ".join(cells))
        elif self.row_independent.get(self.backend) is not None:
            parts.append(f"  rows independent of M: {'yes' if self.row_independent[self.backend] else 'no'}")
        for b, why in self.unavailable.items():
            parts.append(f"  {b} unavailable: {why}")
        if self.kept_fp32:
            parts.append(f"  kept in fp32 (not representable): {', '.join(self.kept_fp32[:6])}")
        return "\n".join(parts)

    def to_dict(self) -> dict:
        return {"requested": self.requested, "backend": self.backend, "implementation": self.implementation,
                "reason": self.reason, "rows": list(self.rows), "est_ms": self.est_ms,
                "row_independent": self.row_independent, "unavailable": self.unavailable,
                "seconds": round(self.seconds, 3), "kept_fp32": self.kept_fp32}


def _linears(model: nn.Module) -> list[nn.Linear]:
    seen, out = set(), []
    for m in model.modules():
        if isinstance(m, nn.Linear) and id(m) not in seen:
            seen.add(id(m))
            out.append(m)
    return out


def _sample(linears: list[nn.Linear]):
    """[(shape, weight or row slice, scale, module or None)] and the count of every shape."""
    counts = Counter(tuple(m.weight.shape) for m in linears)
    items, seen, total = [], set(), 0
    for m in linears:
        shape, w = tuple(m.weight.shape), m.weight.detach()
        if total >= SAMPLE_PARAMS and shape in seen:
            continue
        if w.numel() > SLICE_PARAMS:
            rows = max(1, SLICE_PARAMS // shape[1])
            for start in range(0, min(2 * rows, shape[0]), rows):
                part = w[start:start + rows]
                items.append((shape, part, shape[0] / len(part), None))
                total += part.numel()
        else:
            items.append((shape, w, 1.0, m))
            total += w.numel()
        seen.add(shape)
    return items, counts


def _fn(backend: str, w: torch.Tensor, native: bool = False):
    """A product with `w` as `backend` runs it in the model; `native` (--layer_kernels resolved to
    native): an fp16w layer whose FBGEMM rows depend on M here runs adaspec's kernel for every product,
    as native_gemm.attach_for will do for the model's own layers."""
    if backend == "fp32":  # the layout the model gets when fp32 stays (LlamaForCausalLM.relayout_for_cpu)
        wc = w.t().contiguous().t() if w.device.type == "cpu" else w
        return lambda x: F.linear(x, wc)
    if backend == "fp16":  # --dtype=float16: the model keeps plain float16 nn.Linear layers (nothing to pack)
        wh = w.to(torch.float16)
        return lambda x: F.linear(x.to(torch.float16), wh)
    module = pack_linear(w, None, backend)
    if native and backend == "fp16w":
        from .native_gemm import serve_all_rows

        serve_all_rows(module)
    return module


def _auto(model: nn.Module, rows: tuple[int, ...], budget_s: float = 1.5, native: bool = False):
    t_start = time.perf_counter()
    unavailable = {b: r for b in CANDIDATES if (r := unavailable_reason(b))}
    cands = [b for b in CANDIDATES if b not in unavailable]
    items, counts = _sample(_linears(model))
    fns = {b: [] for b in cands}
    for b in cands:
        for shape, w, scale, module in items:
            try:
                fns[b].append(_fn(b, w, native))
            except ValueError:  # fp16w: weights outside the float16 range -> not a candidate
                unavailable[b] = "weights outside the float16 range"
                break
    cands = [b for b in cands if b not in unavailable]
    xs = {(i, m): torch.randn(m, i) for _, w, _, _ in items for i in (w.shape[1],) for m in rows}
    best = {b: {m: [float("inf")] * len(items) for m in rows} for b in cands}
    with torch.inference_mode():
        for rep in range(REPEATS + 1):
            for m in rows:
                for b in cands:
                    for j, (fn, (_, w, _, _)) in enumerate(zip(fns[b], items)):
                        x = xs[(w.shape[1], m)]
                        t0 = time.perf_counter()
                        fn(x)
                        dt = time.perf_counter() - t0
                        if rep:  # the first pass warms up
                            best[b][m][j] = min(best[b][m][j], dt)
            if rep >= 2 and time.perf_counter() - t_start > budget_s:
                break
        est = {}
        for b in cands:
            est[b] = []
            for m in rows:
                per_shape: dict[tuple, list[float]] = {}
                for (shape, _, scale, _), t in zip(items, best[b][m]):
                    per_shape.setdefault(shape, []).append(t * scale)
                est[b].append(1000 * sum(counts[s] * sum(ts) / len(ts) for s, ts in per_shape.items()))
        first = {}
        for (shape, w, _, _), j in zip(items, range(len(items))):
            first.setdefault(shape, j)
        ri = {b: all(row_independent(fns[b][j], items[j][1].shape[1])
                     and kernel_row_independent(b, items[j][1].shape, native) for j in first.values()) for b in cands}
    choice = pick(est, ri)
    why = ("fastest of the row-independent backends" if ri[choice] else
           "fastest; no candidate has rows independent of M here, so speculation is exact only up to rounding")
    reuse = {}
    if choice != "fp32":
        for (shape, w, scale, module), fn in zip(items, fns[choice]):
            if module is not None:
                reuse[id(module)] = fn
    return BackendChoice("auto", choice, implementation(choice), why, rows, {b: est[b] for b in cands}, ri,
                         unavailable, len(items), time.perf_counter() - t_start), reuse


def pick(est: dict[str, list[float]], ri: dict[str, bool]) -> str:
    """The rule of `auto` over measured estimates (ms per forward at each row count, in the same
    order for every backend) and row independence: among the row-independent candidates (all, if
    none is) the lowest sum; bf16 only if faster than each of the others by BF16_MARGIN at every
    row count."""
    cands = list(est)
    pool = [b for b in cands if ri[b]] or cands
    others = [b for b in pool if b != "bf16"]
    choice = min(others, key=lambda b: sum(est[b])) if others else "bf16"
    if "bf16" in pool and others and all(est["bf16"][i] * BF16_MARGIN < min(est[b][i] for b in others)
                                         for i in range(len(est["bf16"]))):
        choice = "bf16"
    return choice


def select_backend(requested: str, model: nn.Module, verify_rows: int = 4) -> tuple[BackendChoice, dict]:
    """(the choice, {id(nn.Linear): packed module} to reuse) for `model` as loaded (nn.Linear layers)."""
    ref = next(model.parameters())
    dtype_name = str(ref.dtype).removeprefix("torch.")
    check_linear_backend(requested, dtype_name, ref.device.type)
    native = native_backend(ref.dtype)
    if ref.device.type != "cpu" or ref.dtype != torch.float32:
        return BackendChoice(requested, native, implementation(native), f"the {dtype_name} dtype's own kernels"), {}
    if requested == "auto":
        rows = (1, max(2, min(16, verify_rows)))
        return _auto(model, rows, native=getattr(model, "layer_kernels", "torch") == "native")
    why = unavailable_reason(requested)
    if why:
        raise ConfigError(f"--linear_backend={requested} cannot run here: {why}; use --linear_backend=auto or fp32",
                          param="--linear_backend")
    choice = BackendChoice(requested, requested, implementation(requested), "as requested")
    return choice, {}


def kernel_row_independent(backend: str, shape: tuple[int, int], native: bool = False) -> bool:
    """The same check on random weights of `shape`: the model's own weights can hide a kernel's row
    dependence (dequantised GGUF values make some bf16 sums exact whatever their order)."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(*shape, generator=g) * shape[1] ** -0.5
    module = _fn(backend, w, native)
    if native and backend == "fp16w" and not module.native_all:
        from .native_gemm import fbgemm_row_independent

        return fbgemm_row_independent(tuple(shape))  # the kernel did not take it: FBGEMM's answer (cached)
    return row_independent(module, shape[1])


def check_rows(choice: BackendChoice, model: nn.Module) -> None:
    """Record whether the packed model's linears have rows independent of M (explicit backends)."""
    if choice.row_independent or next(model.parameters()).device.type != "cpu":
        return
    shapes = {}
    for m in model.modules():
        if isinstance(m, nn.Module) and hasattr(m, "in_features") and hasattr(m, "out_features"):
            shapes.setdefault((m.out_features, m.in_features), m)
    native = getattr(model, "layer_kernels", "torch") == "native"
    with torch.inference_mode():
        choice.row_independent[choice.backend] = all(
            row_independent(m, m.in_features) and kernel_row_independent(choice.backend, shape, native)
            for shape, m in shapes.items())
