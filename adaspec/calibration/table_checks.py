"""Sanity checks of a loaded cost table, hand-edited ones included (R-G2, issue 8).

`points_problem` looks at the raw `points` list of the file; `sanity_problem` at a parsed table
(duck-typed: `metadata` and `model`). Each returns a sentence naming the JSON field, or None.
"""

from __future__ import annotations

import json
import math
from typing import Any


def points_problem(raw: Any) -> str | None:
    """Why the raw `points` list is malformed, or None: each is [bcap >= 1, x >= 0, cost_s > 0 finite, kv_len >= 0]."""
    if not isinstance(raw, list):
        return f"points: expected a list of [bcap, x, cost_s, kv_len], got {type(raw).__name__}"
    for i, p in enumerate(raw):
        if not isinstance(p, list) or len(p) not in (3, 4):
            return f"points[{i}]: expected [bcap, x, cost_s, kv_len], got {json.dumps(p)}"
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in p if v is not None) or p[2] is None:
            return f"points[{i}]: expected numbers, got {json.dumps(p)}"
        bcap, x, cost = p[0], p[1], p[2]
        if bcap is None or x is None or int(bcap) != bcap or int(x) != x or bcap < 1 or x < 0:
            return f"points[{i}]: bcap must be an integer >= 1 and x an integer >= 0, got {json.dumps(p)}"
        if not math.isfinite(cost) or cost <= 0:
            return f"points[{i}]: cost_s must be a positive finite number of seconds, got {json.dumps(p)}"
        if len(p) == 4 and p[3] is not None and (not math.isfinite(p[3]) or p[3] < 0):
            return f"points[{i}]: kv_len must be >= 0, got {json.dumps(p)}"
    return None


def sanity_problem(table) -> str | None:
    """What makes a (possibly hand-edited) table unusable, or None: coverage that covers nothing or
    does not add up, grid values impossible for the width, KV ranges that are empty, reversed or
    overlapping, and any covered cell whose cost is not a positive finite number (R-G2, issue 8)."""
    m, model = table.metadata, table.model
    if not m.request_buckets or not m.grid or not m.kv_ranges:
        empty = [n for n, v in (("request_buckets", m.request_buckets), ("grid", m.grid), ("kv_ranges", m.kv_ranges))
                 if not v]
        return f"metadata.{empty[0]} is empty: the table covers nothing"
    if any(b < 1 for b in m.request_buckets) or sorted(set(m.request_buckets)) != sorted(m.request_buckets):
        return f"metadata.request_buckets {m.request_buckets} must be distinct integers >= 1"
    if set(m.grid) != set(m.request_buckets):
        return (f"metadata.grid covers request buckets {sorted(m.grid)} but metadata.request_buckets says "
                f"{sorted(m.request_buckets)}")
    for lo, hi in m.kv_ranges:
        if lo < 1 or hi < lo:
            return f"metadata.kv_ranges: [{lo}, {hi}] is not a KV range (need 1 <= min <= max)"
    ranges = sorted(m.kv_ranges)
    for (a_lo, a_hi), (b_lo, b_hi) in zip(ranges, ranges[1:]):
        if b_lo <= a_hi:
            return f"metadata.kv_ranges: [{a_lo}, {a_hi}] and [{b_lo}, {b_hi}] overlap"
    w = m.draft_width
    for b, xs in sorted(m.grid.items()):
        if not xs:
            return f"metadata.grid.{b} is empty"
        lo, hi = (b, b * (w + 1)) if m.axis == "g" else (0, w)
        bad = [x for x in xs if not lo <= x <= hi]
        if bad:
            return (f"metadata.grid.{b}: {m.x_name} values {bad} are impossible for request bucket {b} at width {w} "
                    f"(allowed {lo}..{hi})")
    for b, v in sorted(m.plain_ms.items()):
        if m.axis != "g":
            return "metadata.plain_ms is only meaningful for adaptive_target_verify tables"
        if b not in m.request_buckets:
            return f"metadata.plain_ms.{b}: request bucket {b} is not in metadata.request_buckets {m.request_buckets}"
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            return f"metadata.plain_ms.{b}: cost {v} ms must be a positive finite number"
    problem = _model_problem(model)
    if problem:
        return problem
    cells = [(b, x) for b, xs in sorted(m.grid.items()) for x in xs]
    if cells and len(unusable_cells(table)) == len(cells):
        return ("model: no covered cell has a positive finite cost (negative costs would silently mean full width "
                "everywhere)")
    return None


def _model_problem(model) -> str | None:
    """Non-finite numbers anywhere, non-positive steps per second or costs (sps), a non-positive reference cost
    (additive: the bias is the cost of the smallest Bcap at the smallest x)."""
    d = model.to_dict()
    def numbers(v):
        if isinstance(v, dict):
            for x in v.values():
                yield from numbers(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                yield from numbers(x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield v
    if any(not math.isfinite(v) for v in numbers(d)):
        return "model: holds a non-finite number (NaN or infinity)"
    if d.get("kind") == "additive" and not d.get("bias_s", 0) > 0:
        return f"model.bias_s is {d.get('bias_s')}: the reference cell's cost must be positive"
    if d.get("kind") == "sps":
        curves = d.get("curves") or [d]
        for c in curves:
            if any(v <= 0 for v in list(c.get("sps", [])) + list(c.get("cost_s", []))):
                return "model: sps and cost_s values must be positive"
    return None


def unusable_cells(table) -> list[tuple[int, int]]:
    """Covered (Bcap, x) cells where the model gives no positive finite cost: they run at full width."""
    out = []
    for b, xs in sorted(table.metadata.grid.items()):
        for x in xs:
            try:
                c = table.model.cost_ms(b, x)
            except (ValueError, TypeError, KeyError, IndexError, ZeroDivisionError):
                c = None
            if c is None or not math.isfinite(c) or c <= 0:
                out.append((b, x))
    return out
