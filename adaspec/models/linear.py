"""Linear-layer backends: how the target's and the drafts' matrix products run (issue 14; R-A1, R-A4, R-B2, R-G3).

`--linear_backend` (EngineConfig.linear_backend) picks one for every linear layer of the target, of
the drafts and of both LM heads:

- `fp32`: `nn.Linear` on float32 weights (MKL sgemm), stored column-major on CPU (same values; this
  CPU's BLAS runs the [in, out] operand 1.5-2x faster for 4-16 row products). Today's default and
  the reference every other backend is compared with.
- `fp16w`: weights rounded once to float16 and packed for FBGEMM; activations, accumulation and
  outputs stay float32. Half the weight bytes per token, and its row cost stays flat longer.
  `torch.fbgemm_linear_fp16_weight` is deprecated in the pinned torch but present and measured
  fastest at one row (0.25 vs 0.31 ms per SmolLM2 layer for `torch.ops.quantized.linear_dynamic_fp16`,
  which computes bit-identical results); the latter is the fallback if a torch drops the former.
  With `--layer_kernels=native`, products of the row counts (up to 32) where adaspec's own kernel was
  measured faster at load run in it instead, layer by
  layer where it gives FBGEMM's bits on this machine (models/native_gemm.py says why and how). On
  CPUs where FBGEMM's rows depend on the row count (AVX2 without AVX-512), that kernel runs every
  fp16w product instead, which keeps rows independent of M.
- `bf16`: weights in bfloat16; activations cast to bfloat16 for the product (oneDNN), output in the
  input's dtype. On CPU the weights are reordered once into oneDNN's blocked layout
  (`torch.ops.mkldnn._linear_pointwise`), where `F.linear` reorders them again in every call. On the
  AMX Xeon, all 210 layer products of SmolLM2 in one throw-away timing (other core busy): 1.7-1.9x
  faster at 1, 8, 48 and 512 rows, 0.9-1.0x at 192 and 2048; a bf16 decode step at 48 requests spent
  84 ms in its linears instead of 122 (BENCHMARKS.md, issue 14 follow-up 2). Its rows kept their
  bits for M = 2..16 there and not at 32-64, so `auto`'s row check (M <= 16) may pass it. A
  `--dtype=bfloat16` model on CPU gets the same packing (the training teacher and the answer
  generator of `train-draft` are such models).
- `int8`: opt-in only, it changes the model's outputs: per-output-channel symmetric int8 weights,
  per-row symmetric int8 activations, exact int32 accumulation (`torch._int_mm`), float32 rescale.
  Quantising each row on its own (not the whole batch, as `torch.ops.quantized.linear_dynamic`
  does) keeps a row's output independent of the other rows in the product.
- `auto`: `linear_select.choose` measures the candidates on the model's own shapes at load.

Exactness (R-B2). Speculative greedy equals plain greedy on a backend when a row's output does not
depend on how many rows share the product (plain decode multiplies 1 row per request, a verify
1 + k). `row_independent` checks that property of the linears: fp16w and int8 have it here (FBGEMM
accumulates each output element in the same order whatever M is; int8 accumulates exactly), MKL
fp32 and oneDNN bf16 do not on this CPU (their kernels change with M; ~1e-6 relative differences,
so a near-tie can flip), and `auto` prefers backends that have it. The linears are not the only
source. Attention (models/attention.py) gives a row the same bits for any number of query rows
over the same keys, but the key count (the longest context of the batch) still changes the
rounding (~1e-7), so end-to-end equality stays token-level on every backend, as it was in fp32
(the lossless tests check tokens on both fp32 and fp16w).

Packing is for inference only: packed modules have no parameters and no autograd, so training
(adaspec/training) keeps its drafts as plain `nn.Linear` in float32 and never calls `pack_module`.
Packing works on any dense [out, in] matrix, so under tensor parallelism (issue 12) a rank slices
its shard of the dense weight first and packs only that (`pack_linear(weight[rows], ...)`).
On CUDA the backend is the dtype's own (`nn.Linear` as is); config.py refuses the others.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch import nn
import torch.nn.functional as F

from ..config import LINEAR_BACKENDS  # noqa: F401 - re-exported: the flag's values

NATIVE = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
FP16_MAX = 65504.0


def native_backend(dtype: torch.dtype) -> str:
    """The backend that is simply `nn.Linear` in the model's own dtype."""
    return NATIVE[dtype]


def fp16w_implementation() -> str | None:
    """Which FBGEMM fp16-weight entry point this torch has (None: neither, e.g. a non-x86 build)."""
    return _probe_fp16w()


@functools.lru_cache(maxsize=1)
def _probe_fp16w() -> str | None:
    w, x = torch.ones(4, 8), torch.ones(2, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:  # fastest at one row here (module docstring); deprecated, so it may disappear
            torch.fbgemm_linear_fp16_weight(x, torch.fbgemm_pack_gemm_matrix_fp16(w), torch.zeros(4))
            return "torch.fbgemm_linear_fp16_weight"
        except (AttributeError, RuntimeError):
            pass
        try:
            torch.ops.quantized.linear_dynamic_fp16(x, torch.ops.quantized.linear_prepack_fp16(w, None))
            return "torch.ops.quantized.linear_dynamic_fp16"
        except (AttributeError, RuntimeError, NotImplementedError):
            return None


@functools.lru_cache(maxsize=1)
def _probe_mkldnn_bf16() -> bool:
    """Whether this torch can pack bfloat16 weights for oneDNN (x86 builds with mkldnn)."""
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(torch.ones(4, 8, dtype=torch.bfloat16), 1)
        torch.ops.mkldnn._linear_pointwise(torch.ones(2, 8, dtype=torch.bfloat16), packed, None, "none", [], "")
        return True
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


@functools.lru_cache(maxsize=1)
def _probe_int8() -> str | None:
    try:
        torch._int_mm(torch.ones(1, 8, dtype=torch.int8), torch.ones(8, 8, dtype=torch.int8))
        return "torch._int_mm (per-row int8 activations)"
    except (AttributeError, RuntimeError, NotImplementedError):
        return None


def unavailable_reason(backend: str, device_type: str = "cpu") -> str | None:
    """Why `backend` cannot run here (None: it can)."""
    if backend in ("fp32", "bf16", "fp16"):
        return None
    if device_type != "cpu":
        return f"{backend} is a CPU backend"
    if backend == "fp16w" and fp16w_implementation() is None:
        return "this torch build has no FBGEMM fp16-weight GEMM (torch.fbgemm_linear_fp16_weight)"
    if backend == "int8" and _probe_int8() is None:
        return "this torch build has no CPU int8 GEMM (torch._int_mm)"
    return None


def implementation(backend: str) -> str:
    bf16 = ("oneDNN bfloat16, packed weights (torch.ops.mkldnn._linear_pointwise)" if _probe_mkldnn_bf16()
            else "F.linear bfloat16 (oneDNN)")
    return {"fp32": "F.linear float32 (column-major weights)", "bf16": bf16,
            "fp16": "F.linear float16", "fp16w": fp16w_implementation() or "unavailable",
            "int8": _probe_int8() or "unavailable"}[backend]


# ------------------------------------------------------------------------------------ modules
class PackedLinear(nn.Module):
    """An inference-only linear layer y = x W^T + b with W held in a backend's own format."""

    backend = "?"
    # stacking several weights into one product (fuse) leaves every output column's bits as they
    # were: true where each output element's sum runs in an order fixed by in_features alone
    fusable = False

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone(), persistent=False)

    def dense_weight(self) -> torch.Tensor:
        """[out, in] float32: the values this backend multiplies by (for binding a draft's head)."""
        raise NotImplementedError

    def _add_bias(self, y: torch.Tensor) -> torch.Tensor:
        return y if self.bias is None else y.add_(self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, backend={self.backend}"


class Fp16wLinear(PackedLinear):
    backend = "fp16w"
    fusable = True  # FBGEMM blocks K the same whatever N is (tests/unit/test_linear_backends.py)
    # adaspec's own kernel and the row counts it runs faster (measured), set by models/native_gemm.attach
    # only where it gives FBGEMM's bits
    native_gemm = None
    native_rows: frozenset = frozenset()
    native_all = False  # every product in adaspec's kernel (FBGEMM's rows depend on M here; native_gemm.serve_all_rows)

    def __init__(self, weight, bias):
        super().__init__(weight, bias)
        w = weight.detach().float().contiguous()
        lo, hi = torch.aminmax(w)  # one pass, no |w| copy: 10x faster than w.abs().max() (0.4 s of start-up)
        if max(-lo.item(), hi.item()) > FP16_MAX:
            raise ValueError("weights outside the float16 range")
        # the rounded weights, kept only until models/native_gemm.attach_for has packed them for its
        # kernel (or decided not to): reading them back out of FBGEMM's packing (dense_weight) costs
        # a full product per layer, 2.6 s of start-up for the bundled model
        self.weight16 = w.half()
        self.impl = fp16w_implementation()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the deprecation notice of the fbgemm entry point
            if self.impl == "torch.fbgemm_linear_fp16_weight":
                self._packed = torch.fbgemm_pack_gemm_matrix_fp16(w)
                self._zeros = torch.zeros(self.out_features)
            elif self.impl is not None:
                self._packed = torch.ops.quantized.linear_prepack_fp16(w, None)
            else:
                raise RuntimeError(unavailable_reason("fp16w"))

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        if self.native_all:
            x2 = x.reshape(-1, self.in_features)
            if x2.dtype != torch.float32 or x2.stride(1) != 1 or x2.stride(0) < self.in_features:
                x2 = x2.float().contiguous()
            return self.native_gemm(x2).view(*x.shape[:-1], self.out_features)
        if self.native_gemm is not None and x.dim() == 2 and x.shape[0] in self.native_rows \
                and x.dtype == torch.float32 and x.stride(1) == 1 and x.stride(0) >= x.shape[1]:
            return self.native_gemm(x)
        return self._fbgemm(x)

    def _fbgemm(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "torch.fbgemm_linear_fp16_weight":
            return torch.fbgemm_linear_fp16_weight(x, self._packed, self._zeros)
        return torch.ops.quantized.linear_dynamic_fp16(x, self._packed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._add_bias(self._product(x))

    def dense_weight(self) -> torch.Tensor:
        # x = I gives W^T exactly: each output sums one product by 1.0 and zeros
        return self._fbgemm(torch.eye(self.in_features)).t().contiguous()


class Bf16Linear(PackedLinear):
    """bfloat16 weights; the output has the input's dtype (float32 models cast in and out, a
    bfloat16 model's activations pass as they are)."""

    backend = "bf16"

    def __init__(self, weight, bias):
        super().__init__(weight, bias)
        w = weight.detach().to(torch.bfloat16).contiguous()
        self.packed = weight.device.type == "cpu" and _probe_mkldnn_bf16()
        if self.packed:  # oneDNN's blocked layout, reordered once here instead of in every F.linear
            # the layout is chosen for an expected row count; in the same throw-away timing a layout
            # for 64 rows was 15-50% faster than one for 1 row at 1-512 rows (level at 192)
            self.register_buffer("weight_bf16", torch.ops.mkldnn._reorder_linear_weight(w, 64), persistent=False)
        else:
            self.register_buffer("weight_bf16", w, persistent=False)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.bfloat16)
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight_bf16, None, "none", [], "")
        return F.linear(x, self.weight_bf16)

    def forward(self, x):
        return self._add_bias(self._product(x).to(x.dtype))

    def dense_weight(self):
        # x = I gives W^T exactly (one product by 1.0 per output, bf16 values are exact in float32)
        return self._product(torch.eye(self.in_features)).float().t().contiguous()


class Int8Linear(PackedLinear):
    backend = "int8"
    fusable = True  # exact int32 sums, per-row and per-channel scales

    def __init__(self, weight, bias):
        super().__init__(weight, bias)
        if _probe_int8() is None:
            raise RuntimeError(unavailable_reason("int8"))
        w = weight.detach().float().contiguous()
        scale = w.abs().amax(1).clamp_min(1e-30) / 127  # per output channel
        self.register_buffer("scale", scale, persistent=False)
        q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
        self.register_buffer("qweight_t", q.t().contiguous(), persistent=False)

    def forward(self, x):
        x2 = x.reshape(-1, self.in_features)
        sx = x2.abs().amax(1, keepdim=True).clamp_min_(1e-30).div_(127)  # per row: rows never interact
        xq = torch.div(x2, sx).round_().to(torch.int8)
        y = torch._int_mm(xq, self.qweight_t).to(torch.float32).mul_(sx).mul_(self.scale)
        return self._add_bias(y).view(*x.shape[:-1], self.out_features)

    def dense_weight(self):
        return self.qweight_t.t().float() * self.scale[:, None]


_CLASSES = {"fp16w": Fp16wLinear, "bf16": Bf16Linear, "int8": Int8Linear}


def pack_linear(weight: torch.Tensor, bias: torch.Tensor | None, backend: str) -> nn.Module:
    """A packed module computing x @ weight.T + bias with `backend` (ValueError: not representable)."""
    return _CLASSES[backend](weight, bias)


def fuse(module: nn.Module, names: tuple[str, ...], pack) -> nn.Module | None:
    """One packed product for the linears `names` of `module` (same input), their weights stacked
    along the output in that order; the separate layers are removed. None (nothing changed) when
    one is not a plain `nn.Linear`, their inputs or bias use differ, or `pack` cannot represent them.

    Why (issue 14): on CPU one layer's q/k/v (and gate/up) products are small and each call has a
    fixed cost; one call instead of three (two) cut the linears of a SmolLM2 forward at one row by
    ~11% (BENCHMARKS.md). Only backends whose output columns keep their bits when stacked fuse
    (`PackedLinear.fusable`), so a fused model computes exactly what the unfused one does.
    """
    parts = [getattr(module, n, None) for n in names]
    if not all(isinstance(p, nn.Linear) for p in parts) or len({p.in_features for p in parts}) != 1 \
            or len({p.bias is None for p in parts}) != 1:
        return None
    bias = None if parts[0].bias is None else torch.cat([p.bias.detach() for p in parts])
    try:
        packed = pack(torch.cat([p.weight.detach() for p in parts]), bias)
    except ValueError:  # e.g. beyond the float16 range: pack_module keeps the layers as they are
        return None
    for n in names:
        delattr(module, n)
    return packed


def relayout_fp32(root: nn.Module) -> None:
    """fp32 on CPU: store linear weights column-major (same values, same shapes). A head tied to an
    embedding below `root` gets its own column-major copy, so the embedding's rows stay contiguous."""
    embedded = {id(m.weight) for m in root.modules() if isinstance(m, nn.Embedding)}
    with torch.no_grad():
        for module in root.modules():
            w = getattr(module, "weight", None)
            if isinstance(module, nn.Linear) and w.device.type == "cpu" and w.dtype == torch.float32:
                col = w.data.t().contiguous().t()
                if id(w) in embedded:
                    module.weight = nn.Parameter(col, requires_grad=False)
                else:
                    w.data = col


def pack_module(root: nn.Module, backend: str, reuse: dict | None = None) -> dict:
    """Give every linear below `root` the backend, in place; returns {"packed": n, "kept_fp32": [names]}.

    Every `nn.Linear` is replaced, whatever module holds it (so layers added to a draft later are
    covered too). A module that multiplies by a weight outside `nn.Linear` (DraftVocab's head)
    implements `pack_linears(pack)`, where `pack(weight, bias)` returns a packed module. A weight
    the backend cannot represent (fp16w: values beyond the float16 range) keeps its fp32 layer, and
    is named in the report. `reuse`: {id(nn.Linear): packed} built by the auto benchmark.
    First, on backends that fuse exactly (`PackedLinear.fusable`), a module with a
    `fuse_linears(pack)` hook (models/llama.DecoderLayer: q|k|v and gate|up) stacks its products.
    """
    ref = next((p for p in root.parameters()), None)
    native = ref is None or ref.device.type != "cpu" or backend == native_backend(ref.dtype)
    if native and ref is not None and ref.device.type == "cpu" and ref.dtype == torch.bfloat16 \
            and backend == "bf16" and _probe_mkldnn_bf16():
        native = False  # a bfloat16 CPU model: same products, weights packed once (Bf16Linear)
    if native:
        if ref is not None and ref.device.type == "cpu" and ref.dtype == torch.float32:
            relayout_fp32(root)
        return {"packed": 0, "kept_fp32": []}
    pack = functools.partial(pack_linear, backend=backend)
    fused = 0
    if _CLASSES[backend].fusable:
        for module in list(root.modules()):
            hook = getattr(module, "fuse_linears", None)
            if callable(hook):
                fused += hook(pack)
    done: dict[int, nn.Module] = {}
    kept: list[str] = []
    for parent_name, parent in list(root.named_modules(remove_duplicate=False)):
        for name, child in list(parent._modules.items()):  # named_children() would skip a shared child
            if not isinstance(child, nn.Linear):
                continue
            if id(child) not in done:
                try:
                    done[id(child)] = (reuse or {}).get(id(child)) or pack_linear(child.weight, child.bias, backend)
                except ValueError:
                    done[id(child)] = child
                    kept.append(f"{parent_name}.{name}".lstrip("."))
            setattr(parent, name, done[id(child)])
    for module in root.modules():
        hook = getattr(module, "pack_linears", None)
        if callable(hook):
            hook(pack)
    if kept:
        relayout_fp32(root)
    root.requires_grad_(False)
    return {"packed": sum(1 for m in done.values() if isinstance(m, PackedLinear)), "fused": fused, "kept_fp32": kept}


def dense_weight(module: nn.Module) -> torch.Tensor:
    """The [out, in] weight values of an `nn.Linear` or a packed linear."""
    return module.weight if isinstance(module, nn.Linear) else module.dense_weight()


def row_independent(fn, in_features: int, sizes=tuple(range(2, 17)), seed: int = 0) -> bool:
    """True if every row of fn(x[:M]) equals fn of that row alone, bit for bit, for each M in sizes."""
    g = torch.Generator().manual_seed(seed)
    # a plain nn.Linear (the dtype's own backend, e.g. bf16) takes inputs of its weight's dtype
    dtype = fn.weight.dtype if isinstance(fn, nn.Linear) else torch.float32
    x = torch.randn(max(sizes), in_features, generator=g).to(dtype)
    alone = torch.cat([fn(x[i:i + 1]) for i in range(max(sizes))])
    return all(torch.equal(fn(x[:m]), alone[:m]) for m in sizes)
