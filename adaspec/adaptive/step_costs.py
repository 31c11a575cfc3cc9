"""The adaptive draft step's cost tables: {k: ms of a whole round} for the batch about to be planned.

A calibrated table prices a round of B requests at its request bucket Bcap (the first prepared bucket
>= B, R-C3). No round in adaspec is padded to its bucket (on CPU a prepared shape is only a point
where the cost was measured, and CUDA graphs are not captured): a round of B requests computes B
requests' rows. Pricing it at Bcap is an upper bound, and not a neutral one: a draft step adds rows
to a round, and what a row costs relative to a plain round grows with B. Measured on the bundled
model (fp32, one thread, k = 1 over plain): 1.09x at B = 1, 1.27x at 2, 1.34x at 3, 1.55x at 4
(BENCHMARKS.md, stop 41). With the CPU default buckets 1, 4, 16, a round of 2 or 3 requests was
priced as a round of 4, where k = 0 wins on the mixed stream, while a fixed k = 1 paid 11% on the
staggered stream whose batch holds 2.4 requests on average (issue 13).

So (adaspec's extension, `StepPolicy.interpolate_buckets`, default on) a batch of B requests strictly
between two calibrated buckets lo < B < Bcap is priced by linear interpolation of the two tables in
B, for every k: cost(B, k) = cost(lo, k) + (B - lo) / (Bcap - lo) * (cost(Bcap, k) - cost(lo, k)).
On the table above, interpolating 1 -> 4 prices k = 1 at 1.27x plain at B = 2 (measured 1.27x) and
1.42x at B = 3 (measured 1.34x): still conservative, no longer a different bucket's answer. Where
no calibrated bucket lies below B, or the lower one is not covered (KV range, a missing k), the
batch is priced at Bcap as before.
"""

from __future__ import annotations

from typing import Callable, Sequence

CostFn = Callable[[int, int], "float | None"]
Table = dict[int, float]


def interpolate_tables(b: int, lo: int, lo_table: Table, hi: int, hi_table: Table) -> Table:
    """Per-k linear interpolation in the request count between the tables of buckets lo < b < hi."""
    if not lo < b < hi:
        raise ValueError(f"need lo < b < hi, got lo={lo}, b={b}, hi={hi}")
    if set(lo_table) != set(hi_table):
        raise ValueError(f"tables differ in their step counts: {sorted(lo_table)} vs {sorted(hi_table)}")
    t = (b - lo) / (hi - lo)
    return {k: lo_table[k] + t * (hi_table[k] - lo_table[k]) for k in hi_table}


class StepCostTables:
    """Per-bucket tables (cached: `cost_ms` must be a pure function of (bcap, k)) and the table a
    batch of B requests is priced at (module docstring)."""

    def __init__(self, k_max: int, cost_ms: CostFn, allow_zero: bool = True,
                 buckets: Sequence[int] | None = None,
                 covers: Callable[[int, "int | None"], bool] | None = None):
        self.k_max, self.cost_ms, self.allow_zero = k_max, cost_ms, allow_zero
        self.buckets = sorted(set(buckets)) if buckets else []
        self.covers = covers
        self._tables: dict[int, tuple[Table | None, str | None]] = {}
        self._between: dict[tuple[int, int], Table] = {}

    def bucket(self, bcap: int | None) -> tuple[Table | None, str | None]:
        """Bucket `bcap`'s table {k: ms} (k = 1..k_max, and 0 when allowed and measured), or None and why not."""
        if bcap is None:
            return None, "batch exceeds every prepared request bucket"
        if bcap not in self._tables:
            table: Table = {}
            missing = None
            for k in range(1, self.k_max + 1):
                c = self.cost_ms(bcap, k)
                if c is None:
                    missing = f"cost not covered at bcap={bcap}, k={k}; running k_max={self.k_max}"
                    break
                table[k] = float(c)
            if missing is None and self.allow_zero:
                c0 = self.cost_ms(bcap, 0)
                if c0 is not None:
                    table[0] = float(c0)
            self._tables[bcap] = (None, missing) if missing else (table, None)
        return self._tables[bcap]

    def for_batch(self, b: int, bcap: int, table: Table, kv_len: int | None = None) -> Table:
        """The table a batch of `b` requests is priced at, given its bucket `bcap`'s (covered) table:
        interpolated from the largest calibrated bucket below `b` when there is one with the same step
        counts (and covering `kv_len`), else `table` itself."""
        if b >= bcap:  # a batch that fills its bucket (asked every batch: the cheap test first)
            return table
        below = [x for x in self.buckets if x < b]
        if not below:
            return table
        lo = below[-1]
        lo_table, _ = self.bucket(lo)
        if lo_table is None or set(lo_table) != set(table):
            return table
        if self.covers is not None and not self.covers(lo, kv_len):
            return table
        key = (b, bcap)
        if key not in self._between:
            self._between[key] = interpolate_tables(b, lo, lo_table, bcap, table)
        return self._between[key]
