"""adaspec's own layer kernels behind `--layer_kernels` (issue 14): adaspec/kernels/*.cpp via ctypes.

`--layer_kernels=native` (what `auto` picks on CPU in float32 when the kernels build) runs
everything of a decoder layer except its linear products in adaspec's C++ kernels: attention over
the KV cache with the rotary embedding and the cache writes folded in, RMSNorm with the residual add,
and SiLU-and-multiply. `torch` runs them as torch ops (SDPA for attention). The linear products have
their own switch, `--linear_backend`.

Why: a decode step of a small model on CPU spends more in torch's per-op dispatch than in these
ops' arithmetic (about 40 small ops per layer), and torch's SDPA, given the 3-12 query rows per KV
head of a decode or verify step, runs at a third of this core's memory bandwidth (BENCHMARKS.md,
"Native layer kernels, and issue 14 re-measured"). Every kernel gives a row the same bits whatever
shares its call, which is what verify rows equal plain rows by (models/attention.py).

`NativePlan` holds what the attention kernel needs of a forward's layout, built once per forward
(every layer reuses it): each request's cache slot and row range, each row's position and the keys
it attends to, [lo, hi): causal (hi = position + 1) and, with a sliding window, lo = position -
window + 1.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from ..kernels import build

LAYER_KERNELS = ("auto", "native", "torch")
W = 16  # vectors of 16 floats (8 on AVX2 CPUs, simd.h): head sizes and cache lengths are multiples of 16 everywhere

_P, _I64, _I32, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float
_SIGNATURES = {
    "adaspec_ragged_attention_f32": [_P, _I64, _I64, _P, _I64, _I64, _P, _I64, _I64,
                                     _P, _P, _I64, _I64, _I64, _I64, _I64,
                                     _P, _P, _I32, _P, _P, _P, _P, _P,
                                     _P, _I32, _I32, _I32, _F],
    "adaspec_add_rmsnorm_f32": [_P, _I64, _P, _P, _P, _P, _I32, _I32, _F],
    "adaspec_silu_mul_f32": [_P, _P, _I32, _I32],
}


class _Kernels:
    attention = add_rmsnorm = silu_mul = None


_k = _Kernels()


def kernels() -> _Kernels | str:
    """The loaded kernel functions, or a one-line reason why they are unavailable. Once loaded they
    stay loaded: models resolved to native keep running on them whatever the environment says later."""
    if _k.attention is None:
        lib = build.load()
        if isinstance(lib, str):
            return lib
        fs = {}
        for name, argtypes in _SIGNATURES.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = argtypes, ctypes.c_int
            fs[name] = f
        _k.add_rmsnorm, _k.silu_mul = fs["adaspec_add_rmsnorm_f32"], fs["adaspec_silu_mul_f32"]
        _k.attention = fs["adaspec_ragged_attention_f32"]
    return _k


def unavailable(device: torch.device | str, dtype: torch.dtype, cfg) -> str | None:
    """Why the native kernels cannot serve a model of config `cfg` (None when they can)."""
    if torch.device(device).type != "cpu":
        return f"they are CPU kernels (the model is on {torch.device(device).type})"
    if dtype != torch.float32:
        return f"they compute in float32 (the model is {str(dtype).removeprefix('torch.')})"
    if cfg.head_dim % W or cfg.head_dim > 256:
        return f"they need a head size that is a multiple of {W} up to 256 (the model's is {cfg.head_dim})"
    k = build.disabled() or kernels()
    return k if isinstance(k, str) else None


def resolve(choice: str, device, dtype: torch.dtype, cfg) -> tuple[str, str]:
    """(native | torch, why) for `--layer_kernels=choice`; ValueError when native cannot run."""
    if choice not in LAYER_KERNELS:
        raise ValueError(f"--layer_kernels={choice}: allowed values are {', '.join(LAYER_KERNELS)}")
    how = "auto" if choice == "auto" else "asked for"
    if choice == "torch":
        return "torch", f"{how}; torch ops, scaled_dot_product_attention"
    reason = unavailable(device, dtype, cfg)
    if reason is None:
        return "native", f"{how}; adaspec's C++ kernels, adaspec/kernels/*.cpp"
    if choice == "native":
        raise ValueError(f"--layer_kernels=native cannot run here: {reason}; use --layer_kernels=auto or torch")
    return "torch", f"{how}; torch ops, as adaspec's kernels cannot run: {reason}"


@dataclass
class NativePlan:
    req_slot: torch.Tensor  # [B] int64
    req_off: torch.Tensor  # [B + 1] int32, row offsets of the requests
    row_pos: torch.Tensor  # [T] int32
    row_lo: torch.Tensor  # [T] int32, first key a row sees
    row_hi: torch.Tensor  # [T] int32, one past the last key a row sees
    ptrs: tuple[int, ...] = ()  # the five tensors' addresses, in that order

    def __post_init__(self):
        self.ptrs = tuple(t.data_ptr() for t in (self.req_slot, self.req_off, self.row_pos, self.row_lo, self.row_hi))


def native_plan(slots: list[int], starts: list[int], q_lens: list[int], sliding_window: int | None) -> NativePlan:
    if _k.attention is None and isinstance(kernels(), str):
        raise RuntimeError(f"native layer kernels are unavailable: {kernels()}")
    offsets, pos = [0], []
    for start, q in zip(starts, q_lens):
        offsets.append(offsets[-1] + q)
        pos += range(start, start + q)
    row_pos = torch.tensor(pos, dtype=torch.int32)
    row_hi = row_pos + 1
    row_lo = (row_hi - sliding_window).clamp_(min=0) if sliding_window is not None else torch.zeros_like(row_pos)
    return NativePlan(req_slot=torch.tensor(slots, dtype=torch.int64), req_off=torch.tensor(offsets, dtype=torch.int32),
                      row_pos=row_pos, row_lo=row_lo, row_hi=row_hi)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"native {what} kernel failed with code {rc}")


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor,
           plan: NativePlan, cos: torch.Tensor | None = None, sin: torch.Tensor | None = None) -> torch.Tensor:
    """Rotate q [T, H, D] and k [T, KVH, D] by cos/sin ([T, 1, D] from RotaryEmbedding.cos_sin; None:
    already rotated), write k and v into the caches at the plan's rows, attend; -> [T, H * D]."""
    T, H, D = q.shape
    if q.stride(2) != 1 or k.stride(2) != 1 or v.stride(2) != 1:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if (cache_k.shape != cache_v.shape or cache_k.stride() != cache_v.stride() or cache_k.stride(3) != 1
            or cache_k.shape[2] % W or cache_k.shape[1] != k.shape[1] or cache_k.shape[3] != D
            or cache_k.dtype != torch.float32 or q.dtype != torch.float32):
        raise ValueError(f"the native attention kernel needs float32 K and V caches of one layout, {W} * n positions "
                         f"long, with the new rows' KV heads and head size (caches {tuple(cache_k.shape)} / "
                         f"{tuple(cache_v.shape)}, strides {cache_k.stride()} / {cache_v.stride()}; k {tuple(k.shape)})")
    rot = (None, None)
    if cos is not None:  # kept referenced until the call returns
        cos, sin = (t.reshape(T, D).to(torch.float32).contiguous() for t in (cos, sin))
        rot = (cos.data_ptr(), sin.data_ptr())
    out = q.new_empty(T, H * D)
    _check(_k.attention(q.data_ptr(), q.stride(0), q.stride(1), k.data_ptr(), k.stride(0), k.stride(1),
                        v.data_ptr(), v.stride(0), v.stride(1),
                        cache_k.data_ptr(), cache_v.data_ptr(), cache_k.stride(0), cache_k.stride(1),
                        cache_k.stride(2), cache_k.shape[2], cache_k.shape[0], *plan.ptrs[:2], len(plan.req_slot),
                        *plan.ptrs[2:],
                        *rot, out.data_ptr(), H, k.shape[1], D, D ** -0.5), "attention")
    return out


def add_rmsnorm(x: torch.Tensor, add: torch.Tensor | None, weight: torch.Tensor, eps: float):
    """RMSNorm of x [T, H] (x + add when `add` is given, which then receives the sum): -> (sum or x,
    weight * normalised). `add` must be a fresh contiguous tensor the caller owns (it is overwritten)."""
    T, H = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    out = x.new_empty(T, H)
    if add is not None and not add.is_contiguous():
        add = add.contiguous()
    a = add.data_ptr() if add is not None else None
    _check(_k.add_rmsnorm(x.data_ptr(), x.stride(0), a, a, weight.data_ptr(), out.data_ptr(), T, H, eps), "RMSNorm")
    return (add if add is not None else x), out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[T, 2F] (gate | up) -> silu(gate) * up [T, F]."""
    gate_up = gate_up.contiguous()
    T, F2 = gate_up.shape
    out = gate_up.new_empty(T, F2 // 2)
    _check(_k.silu_mul(gate_up.data_ptr(), out.data_ptr(), T, F2 // 2), "SiLU")
    return out
