"""Prepared geometry (pure data, imported by calibration, adaptive, runner and engine): the request buckets `Bcap` and target-row buckets `G` warmed at start-up.

On CUDA these would be the shapes captured as graphs; on CPU there is no capture, so "prepared"
means warmed shapes that the cost model is calibrated on. A round is costed at the first prepared
bucket covering it (`pad_requests`, `pad_rows`); serving never adds a bucket.

Target-row ladder per request bucket (split layout): every multiple of `Bcap` from `Bcap` (no
drafts verified) to full width `Bcap * (w + 1)`, i.e. one bucket per average verify length. On CPU a
round executes its exact rows (padding would only add real work); its cost is predicted at the
covering bucket, an upper bound. (Until stop 59, G = 2 and 3 were lifted to 4 at Bcap = 1, because
MKL's fp32 products of 2-3 rows were slower than of 4, NOTES.md. But a round of 2 or 3 rows runs 2 or
3 rows, so the lift priced it at 4 rows' cost: below its real cost on MKL, and above it on the
fp16-weight kernels that are the CPU default now, where 2 and 3 rows cost 0.77x and 0.92x of 4 (all
121 products: 11.0, 13.2, 14.3 ms). Measured rows price every row count as it runs; for DSpark's
verify at B = 1 that alone changed little, BENCHMARKS.md stop 59.) Unified layout
(R-F6): per request count B, the first prepared buckets covering B, 2B, 4B and B * (w + 1).

Which buckets to prepare is the engine's choice (`choose_prepared`). With no explicit request
buckets on a CPU device it prepares a sparse geometry, because there a bucket is only a point where
the cost is measured, and the built-in calibration (R-F3: 8 + 3 x 32 rounds at every prepared point)
of the dense one takes far longer than a start-up may (issue 13: 38 points, ~870 s of rounds alone
for DSpark w = 7 at 16 slots on one core): request buckets 1, 4, 16, ... (x4) and the largest,
target rows B, 2B and full width, and at Bcap = 1 every row count up to 4 (`sparse_row_ladder`). Rows
above the step's row budget (`max_num_batched_tokens`) are never prepared: no round may compute them.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field


def default_request_buckets(max_seqs: int, factor: int = 2) -> list[int]:
    buckets, b = [], 1
    while b < max_seqs:
        buckets.append(b)
        b *= factor
    return buckets + [max_seqs]


CPU_BUCKET_FACTOR = 4


def sparse_row_ladder(bcap: int, width: int) -> list[int]:
    """B (no drafts), 2B (one per request on average) and full width B(w + 1); at Bcap = 1 also 3 and 4 rows,
    where a lone request's useful verify lengths lie (a point at one request costs little to calibrate)."""
    full = bcap * (width + 1)
    rows = {bcap, min(2 * bcap, full), full}
    if bcap == 1:
        rows |= {r for r in (3, 4) if r < full}
    return sorted(rows)


def split_row_ladder(bcap: int, width: int) -> list[int]:
    """Every multiple of Bcap from Bcap to full width B(w + 1)."""
    full = bcap * (width + 1)
    return sorted(set(range(bcap, full, bcap)) | {full})


def first_covering(buckets, value: int) -> int | None:
    """The smallest bucket >= value, or None."""
    return _covering_sorted(sorted(buckets), value)


def _covering_sorted(buckets, value: int) -> int | None:
    i = bisect_left(buckets, value)
    return buckets[i] if i < len(buckets) else None


def unified_row_buckets(b: int, width: int, prepared) -> tuple[int, ...]:
    """R-F6: the first prepared buckets covering B, 2B, 4B and B(w+1) (deduplicated, in order)."""
    prepared = sorted(set(prepared))
    out: list[int] = []
    for want in (b, 2 * b, 4 * b, b * (width + 1)):
        g = first_covering(prepared, want)
        if g is not None and g not in out:
            out.append(g)
    return tuple(out)


@dataclass(frozen=True)
class PreparedGeometry:
    request_buckets: tuple[int, ...]
    target_rows: dict[int, tuple[int, ...]] = field(default_factory=dict)  # Bcap -> prepared G
    width: int = 0  # draft tokens per request at full width (k_max or w)
    unified: bool = False

    @classmethod
    def build(cls, request_buckets: list[int], width: int, unified: bool = False, sparse: bool = False,
              max_rows: int | None = None) -> "PreparedGeometry":
        request_buckets = sorted(set(request_buckets))
        if unified:
            ladder = sorted({g for b in request_buckets for g in (b, 2 * b, 4 * b, b * (width + 1))})
            rows = {b: unified_row_buckets(b, width, ladder) for b in request_buckets}
        else:
            ladder_of = sparse_row_ladder if sparse else split_row_ladder
            rows = {b: tuple(ladder_of(b, width)) for b in request_buckets}
        if max_rows is not None:  # a round never computes more rows than the step budget
            rows = {b: tuple(g for g in gs if g <= max_rows) or (b,) for b, gs in rows.items()}
        return cls(tuple(request_buckets), rows, width, unified)

    def __post_init__(self):
        # sorted once: the controllers pad requests and rows several times a round (sorting per call was ~20 us)
        object.__setattr__(self, "_sorted_requests", tuple(sorted(self.request_buckets)))
        object.__setattr__(self, "_sorted_rows", {b: tuple(sorted(g)) for b, g in self.target_rows.items()})

    def pad_requests(self, b: int) -> int | None:
        return _covering_sorted(self._sorted_requests, b)

    def pad_rows(self, bcap: int, rows: int) -> int | None:
        return _covering_sorted(self._sorted_rows.get(bcap, ()), rows)

    def describe(self) -> dict:
        return {
            "layout": "unified" if self.unified else "split",
            "request_buckets": list(self.request_buckets),
            "target_graph_rows": {str(b): list(g) for b, g in self.target_rows.items()},
            "draft_width": self.width,
        }


def choose_prepared(max_seqs: int, width: int, device_type: str, explicit: tuple[int, ...] | None = None,
                    unified: bool = False, max_rows: int | None = None,
                    step_mode: bool = False) -> tuple["PreparedGeometry", str | None]:
    """The geometry an adaptive engine prepares, and why it is sparse (None when it is not).
    `step_mode`: adaptive draft step, whose points are Bcap x k = 0..width (not target rows)."""
    if explicit or device_type != "cpu":
        buckets = list(explicit or default_request_buckets(max_seqs))
        return PreparedGeometry.build(buckets, width, unified, max_rows=max_rows), None
    dense = PreparedGeometry.build(default_request_buckets(max_seqs), width, unified, max_rows=max_rows)
    geo = PreparedGeometry.build(default_request_buckets(max_seqs, CPU_BUCKET_FACTOR), width, unified,
                                 sparse=not step_mode, max_rows=max_rows)

    def points(g: "PreparedGeometry") -> int:
        if step_mode:
            return len(g.request_buckets) * (width + 1)
        return sum(len(v) for v in g.target_rows.values())

    if geo == dense:  # e.g. the draft step at one request slot: nothing left out
        return geo, None
    fewer_buckets = geo.request_buckets != dense.request_buckets
    slots = f"{max_seqs} request slot{'s' if max_seqs > 1 else ''}"
    what = [f"request buckets {list(geo.request_buckets)} instead of {list(dense.request_buckets)}" if fewer_buckets
            else f"request buckets {list(geo.request_buckets)} (all of them, for {slots})"]
    if not (unified or step_mode):
        what.append("target rows B, 2B, full width (and 3, 4 at one request) instead of every multiple of B")
    why = (f"sparse CPU geometry: on a CPU device a prepared bucket only says where costs are measured "
           f"(rounds run their exact rows, nothing is captured), so the engine prepares " + " and ".join(what)
           + f" ({points(geo)} calibration points instead of {points(dense)}), which keeps the built-in calibration "
           "of every prepared point within start-up time; pass --graph_decode_batch_sizes to prepare other "
           "request buckets" + ("" if step_mode else " (with every target row bucket)"))
    return geo, why
