"""Prepared geometry (pure data, imported by calibration, adaptive, runner and engine): the request buckets `Bcap` and target-row buckets `G` warmed at start-up.

On CUDA these would be the shapes captured as graphs; on CPU there is no capture, so "prepared"
means warmed shapes that the cost model is calibrated on. A round is costed at the first prepared
bucket covering it (`pad_requests`, `pad_rows`); serving never adds a bucket.

Target-row ladder per request bucket (split layout): every multiple of `Bcap` from `Bcap` (no
drafts verified) to full width `Bcap * (w + 1)`, i.e. one bucket per average verify length, with
G = 2 and 3 lifted to 4 at Bcap = 1 (fp32 products of 2-3 rows are slower than of 4 on these
CPUs, NOTES.md). On CPU a round executes its exact rows (padding would only add real work);
its cost is predicted at the covering bucket, an upper bound. Unified layout
(R-F6): per request count B, the first prepared buckets covering B, 2B, 4B and B * (w + 1).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field


def default_request_buckets(max_seqs: int) -> list[int]:
    buckets, b = [], 1
    while b < max_seqs:
        buckets.append(b)
        b *= 2
    return buckets + [max_seqs]


def split_row_ladder(bcap: int, width: int) -> list[int]:
    step = bcap
    full = bcap * (width + 1)
    rows = sorted(set(range(bcap, full, step)) | {full})
    if bcap == 1:
        rows = sorted({4 if r in (2, 3) and full >= 4 else r for r in rows})
    return rows


def first_covering(buckets, value: int) -> int | None:
    """The smallest bucket >= value, or None."""
    buckets = sorted(buckets)
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
    def build(cls, request_buckets: list[int], width: int, unified: bool = False) -> "PreparedGeometry":
        request_buckets = sorted(set(request_buckets))
        if unified:
            ladder = sorted({g for b in request_buckets for g in (b, 2 * b, 4 * b, b * (width + 1))})
            rows = {b: unified_row_buckets(b, width, ladder) for b in request_buckets}
        else:
            rows = {b: tuple(split_row_ladder(b, width)) for b in request_buckets}
        return cls(tuple(request_buckets), rows, width, unified)

    def pad_requests(self, b: int) -> int | None:
        return first_covering(list(self.request_buckets), b)

    def pad_rows(self, bcap: int, rows: int) -> int | None:
        return first_covering(list(self.target_rows.get(bcap, ())), rows)

    def describe(self) -> dict:
        return {
            "layout": "unified" if self.unified else "split",
            "request_buckets": list(self.request_buckets),
            "target_graph_rows": {str(b): list(g) for b, g in self.target_rows.items()},
            "draft_width": self.width,
        }
