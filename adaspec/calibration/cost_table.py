"""Saved cost tables: one immutable fitted model plus compatibility metadata and coverage (R-G1..R-G3, R-F7).

One `CostTable` type serves both adaptive modes: the second axis is `G` (target rows) for
`adaptive_target_verify` and `k` (draft steps) for `adaptive_draft_step` (`table.axis` is "g"/"k");
the models are axis-agnostic.

File format (JSON): `{"format": "adaspec-cost-table", "metadata": {...}, "model": {...},
"points": [[bcap, x, cost_s, kv_len], ...]}`. `metadata.version` is 1; a table whose metadata has
no `version` is a legacy table and, if it does not record `draft_width`, counts as width 7 (R-G3).

`save()` never overwrites: the directory must exist and the file must not (`adaspec/outputs.py`:
a temporary file hard-linked to the final name, so a crash leaves no table or a complete one).
`from_dict`/`load` sanity-check hand-edited tables (`table_checks.py`).

`load()` checks every compatibility field against `TableCompat` (what this engine runs) and
reports every mismatch with both values and the fix. Lookups outside the calibrated request
buckets or KV ranges return None: the caller admits full width (R-F7).
"""

from __future__ import annotations

from ..config import NATIVE_LINEAR_BACKEND
from ..errors import UserError
from ..outputs import write_new_file

import datetime as _dt
import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .config import FALLBACK_NOTE, GREEDY_NOTE, EffectiveCalibration, EngineFacts, compact_json, mode_axis
from .cost_models import CostModel, fit_model, model_from_dict
from .cost_points import CostModelError, CostPoint, as_points
from .heldout import HeldoutReport, heldout_error
from .table_checks import points_problem as _points_problem, sanity_problem, unusable_cells

TABLE_FORMAT = "adaspec-cost-table"
TABLE_FLAG = "--adaptive_target_verify_cost_table"
OUTPUT_FLAG = "--adaptive_target_verify_cost_table_output"
LEGACY_DRAFT_WIDTH = 7  # a version-less table without draft_width was calibrated for Draft7 (R-G3)


class CostTableError(UserError, ValueError):
    """A cost table cannot be written or read; the message names the file, the flag and the fix."""


class CostTableCompatibilityError(CostTableError):
    """A saved table does not fit this engine. `mismatches`: (field, table value, engine value)."""

    def __init__(self, message: str, mismatches: list[tuple[str, Any, Any]]):
        super().__init__(message, param=TABLE_FLAG)
        self.mismatches = mismatches

    @property
    def fields(self) -> list[str]:
        return [m[0] for m in self.mismatches]


class TableMetadata(BaseModel):
    """Compatibility metadata, calibration config and coverage of a saved table."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: Literal[1] = 1
    algorithm: Literal["MTP", "DSpark", "Suffix", "MTP+Suffix"]
    mode: Literal["adaptive_target_verify", "adaptive_draft_step"] = "adaptive_target_verify"
    draft_width: int = Field(ge=1)  # w (verify) or k_max (draft step)
    weights_fingerprint: str
    quantization: str = "none"
    dtype: str
    linear_backend: str = "fp32"  # models/linear.py; a table without it predates issue 14 (see from_dict)
    # models/native_kernels.py; a table without it was measured on torch's ops (before the native kernels)
    layer_kernels: str = "torch"
    tp_size: int = Field(1, ge=1)
    dp_size: int = Field(1, ge=1)
    cp_size: int = Field(1, ge=1)
    unified: bool = False
    device_type: str
    created_at: str = ""
    calibration: dict[str, Any] = Field(default_factory=dict)  # the effective calibration config used
    request_buckets: list[int] = Field(default_factory=list)  # covered (measured) request buckets
    kv_ranges: list[tuple[int, int]] = Field(default_factory=list)  # covered KV ranges, inclusive
    grid: dict[int, list[int]] = Field(default_factory=dict)  # measured x (G or k) per request bucket
    heldout: dict[str, Any] | None = None  # HeldoutReport.to_dict()
    # adaptive verify only (issue 13, the plain floor): cost in ms of a plain round (no draft, one row
    # per request) per request bucket; empty in tables written before it (the floor is then conservative)
    plain_ms: dict[int, float] = Field(default_factory=dict)
    # where it was measured (calibration/host.py): compared on load, a difference is a warning; empty in
    # tables written before it
    host: dict[str, Any] = Field(default_factory=dict)

    @property
    def axis(self) -> str:
        return mode_axis(self.mode)

    @property
    def x_name(self) -> str:
        return "G" if self.axis == "g" else "k"


@dataclass(frozen=True)
class TableCompat:
    """What this engine runs; a loaded table must match every field (R-G3)."""

    algorithm: str  # "MTP" | "DSpark" | "Suffix" | "MTP+Suffix"
    draft_width: int  # --num_speculative_tokens
    weights_fingerprint: str
    dtype: str  # resolved dtype ("float32", "bfloat16"), never "auto"
    device_type: str  # "cpu" | "cuda"
    quantization: str = "none"
    linear_backend: str = "fp32"  # the resolved --linear_backend (never "auto")
    layer_kernels: str = "torch"  # the resolved --layer_kernels (never "auto")
    tp_size: int = 1
    dp_size: int = 1
    cp_size: int = 1
    unified: bool = False  # --enable_unified_mtp_graph
    mode: str = "adaptive_target_verify"


_FIXES = {
    "mode": ("a table calibrated for one adaptive mode cannot serve the other",
             "load a table calibrated for {engine}"),
    "algorithm": ("a table of one speculative algorithm never serves another (DSpark, MTP, Suffix and MTP+Suffix "
                  "rounds cost differently)",
                  "load a table calibrated for {engine} (or run with --speculative_algorithm={table})"),
    "draft_width": ("Draft5 and Draft7 costs never mix",
                    "load a table calibrated with --num_speculative_tokens={engine} "
                    "(or run with --num_speculative_tokens={table})"),
    "weights_fingerprint": ("the table was measured on other target/draft weights",
                            "load the table made for these weights"),
    "quantization": ("the table was measured with another quantisation", "load a table made with {engine}"),
    "dtype": ("the table was measured with another dtype", "load a table made with --dtype={engine} "
              "(or run with --dtype={table})"),
    "linear_backend": ("the table was measured with another linear backend (another kernel, other costs)",
                       "load a table made with --linear_backend={engine} (or run with --linear_backend={table})"),
    "layer_kernels": ("the table was measured with other layer kernels (attention, norms: other costs)",
                          "load a table made with --layer_kernels={engine} (or run with "
                          "--layer_kernels={table})"),
    "tp_size": ("the parallel topology differs", "load a table made with --tp_size={engine}"),
    "dp_size": ("the parallel topology differs (a DP={table} table cannot serve DP={engine})",
                "load a table made with --dp_size={engine}"),
    "cp_size": ("the parallel topology differs", "load a table made with --cp_size={engine}"),
    "unified": ("split and unified layouts are calibrated separately",
                "load a table made with --enable_unified_mtp_graph={engine_flag}"),
    "device_type": ("the table was measured on another device type", "load a table made with --device={engine}"),
}
_RECALIBRATE = (f"or recalibrate: drop {TABLE_FLAG} and pass {OUTPUT_FLAG}=NEW_FILE to save a fresh table")


def _flag_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _show(v: Any) -> str:
    return _flag_value(v) if isinstance(v, bool) else repr(v)


def compatibility_mismatches(meta: TableMetadata, expected: TableCompat) -> list[tuple[str, Any, Any]]:
    out = []
    for f in fields(TableCompat):
        tv, ev = getattr(meta, f.name), getattr(expected, f.name)
        if tv != ev:
            out.append((f.name, tv, ev))
    order = list(_FIXES)
    return sorted(out, key=lambda m: order.index(m[0]))


@dataclass(frozen=True)
class CostTable:
    """An immutable fitted whole-round cost model with its metadata and raw measurements."""

    model: CostModel
    metadata: TableMetadata
    points: tuple[CostPoint, ...] = ()
    source: str | None = None  # the file it was loaded from (not saved)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, points: Iterable, effective: EffectiveCalibration, compat: TableCompat, *,
              created_at: str | None = None, with_heldout: bool = True,
              plain_ms: dict[int, float] | None = None, host: dict[str, Any] | None = None) -> "CostTable":
        """Fit `effective.model` on the measured points and attach metadata and coverage."""
        pts = as_points(points)
        if compat.mode != effective.mode or compat.draft_width != effective.draft_width:
            raise ValueError(f"TableCompat (mode {compat.mode}, draft_width {compat.draft_width}) does not match the "
                             f"calibration (mode {effective.mode}, draft_width {effective.draft_width})")
        per_bucket = effective.mode == "adaptive_draft_step"  # sps: one k-curve per request bucket (R-C3)
        model = fit_model(pts, effective.model, effective.x_name, per_bucket)
        report: HeldoutReport | None = (heldout_error(pts, effective.model, effective.x_name, per_bucket)
                                        if with_heldout else None)
        grid: dict[int, set[int]] = {}
        for p in pts:
            grid.setdefault(p.bcap, set()).add(p.x)
        meta = TableMetadata(
            algorithm=compat.algorithm, mode=compat.mode, draft_width=compat.draft_width,
            weights_fingerprint=compat.weights_fingerprint, quantization=compat.quantization, dtype=compat.dtype,
            linear_backend=compat.linear_backend, layer_kernels=compat.layer_kernels,
            tp_size=compat.tp_size, dp_size=compat.dp_size, cp_size=compat.cp_size, unified=compat.unified,
            device_type=compat.device_type,
            created_at=created_at or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            calibration=effective.to_config_dict(), request_buckets=sorted(grid),
            kv_ranges=[tuple(r) for r in effective.kv_ranges],
            grid={b: sorted(xs) for b, xs in sorted(grid.items())},
            heldout=report.to_dict() if report else None,
            plain_ms={int(b): float(v) for b, v in sorted((plain_ms or {}).items())}, host=dict(host or {}))
        return cls(model, meta, pts)

    # ------------------------------------------------------------------ lookups
    @property
    def axis(self) -> str:
        return self.metadata.axis

    def covers(self, bcap: int, kv_len: int | None) -> bool:
        """True if `bcap` was calibrated and `kv_len` (None: not checked) lies in a calibrated KV range.
        Callers pass the longest KV length of the batch."""
        if bcap not in self.metadata.request_buckets:
            return False
        return kv_len is None or any(lo <= kv_len <= hi for lo, hi in self.metadata.kv_ranges)

    def cost_ms(self, bcap: int, x: int, kv_len: int | None = None) -> float | None:
        """Whole-round cost in ms at (bcap, G or k), or None outside coverage -> admit full width (R-F7)."""
        if not self.covers(bcap, kv_len):
            return None
        return self.model.cost_ms(bcap, x)

    lookup = cost_ms

    def plain_cost_ms(self, bcap: int, kv_len: int | None = None) -> float | None:
        """Adaptive verify: cost in ms of a plain round (no draft) at `bcap`, or None (not measured or
        outside coverage)."""
        if not self.covers(bcap, kv_len):
            return None
        return self.metadata.plain_ms.get(bcap)

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict:
        return {"format": TABLE_FORMAT, "metadata": self.metadata.model_dump(mode="json"),
                "model": self.model.to_dict(), "points": [list(p) for p in self.points]}

    @classmethod
    def from_dict(cls, data: Any, source: str | None = None, *, sanity: bool = True) -> "CostTable":
        """Parse and sanity-check a table (hand-edited tables included): well-formed points, positive
        finite costs at every covered cell, KV ranges and grids that make sense (issue 8)."""
        where = f"{TABLE_FLAG}={source}" if source else "cost table"
        fix = f"Fix: recalibrate with {OUTPUT_FLAG}=NEW_FILE (or repair the hand edit)"
        if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT:
            raise CostTableError(f"{where}: not an adaspec cost table (missing \"format\": \"{TABLE_FORMAT}\"). "
                                 f"Fix: pass a file written by {OUTPUT_FLAG}", param=TABLE_FLAG)
        raw = data.get("metadata")
        if not isinstance(raw, dict):
            raise CostTableError(f"{where}: metadata: missing or not an object. Fix: pass a file written by {OUTPUT_FLAG}",
                                 param=TABLE_FLAG)
        if "version" not in raw:  # legacy table: no version; without draft_width it was Draft7
            raw = {**raw, "version": 1}
            raw.setdefault("draft_width", LEGACY_DRAFT_WIDTH)
        if "linear_backend" not in raw and raw.get("dtype") in NATIVE_LINEAR_BACKEND:
            # written before --linear_backend existed: linears ran as nn.Linear in the table's dtype
            raw = {**raw, "linear_backend": NATIVE_LINEAR_BACKEND[raw["dtype"]]}
        try:
            meta = TableMetadata.model_validate(raw)
        except ValidationError as e:
            errs = "; ".join(f"metadata.{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
            raise CostTableError(f"{where}: {errs}. {fix}", param=TABLE_FLAG) from None
        raw_points = data.get("points", [])
        problem = _points_problem(raw_points)
        if problem:
            raise CostTableError(f"{where}: {problem}. {fix}", param=TABLE_FLAG)
        if not isinstance(data.get("model"), dict):
            raise CostTableError(f"{where}: model: missing or not an object. {fix}", param=TABLE_FLAG)
        try:
            model = model_from_dict(data.get("model"))
            points = as_points(tuple(p) for p in raw_points)
        except (CostModelError, TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
            detail = e.args[0] if isinstance(e, KeyError) and e.args else e
            raise CostTableError(f"{where}: model: {'missing key ' if isinstance(e, KeyError) else ''}{detail}. "
                                 f"{fix}", param=TABLE_FLAG) from None
        table = cls(model, meta, points, source)
        if sanity:
            table.check_sane()
        return table

    def check_sane(self) -> None:
        problem = sanity_problem(self)
        if problem:
            where = f"{TABLE_FLAG}={self.source}" if self.source else "cost table"
            raise CostTableError(f"{where}: {problem}. Fix: recalibrate with {OUTPUT_FLAG}=NEW_FILE (or repair the "
                                 "hand edit)", param=TABLE_FLAG)

    def context_problem(self, model_context_limit: int) -> str | None:
        """Why this table's KV ranges do not fit the engine's context limit (--max_model_len), or None."""
        beyond = [list(r) for r in self.metadata.kv_ranges if r[1] > model_context_limit]
        if beyond:
            return (f"metadata.kv_ranges {beyond} reach beyond the context limit {model_context_limit} of this engine "
                    "(--max_model_len): the table claims costs for KV lengths no request can have")
        return None

    def save(self, path: str | os.PathLike) -> Path:
        """Write the table to a new file; never overwrites, never leaves a partial file (R-G1)."""
        data = (json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n").encode("utf-8")
        return write_new_file(path, data, OUTPUT_FLAG, "cost table", CostTableError)

    @classmethod
    def load(cls, path: str | os.PathLike, expected: TableCompat) -> "CostTable":
        """Read a saved table and check it against this engine (R-G2, R-G3)."""
        p = Path(path)
        if expected.mode == "adaptive_draft_step":
            raise CostTableError(f"{TABLE_FLAG}={p}: loading precomputed step cost models is not supported with "
                                 "--enable_adaptive_draft_step (R-C3). Fix: drop the flag; every step count is "
                                 "measured at start-up", param=TABLE_FLAG)
        if not p.is_file():
            what = "is a directory, not a file" if p.is_dir() else "does not exist"
            raise CostTableError(f"{TABLE_FLAG}={p}: {what}. Fix: pass a table written by {OUTPUT_FLAG}, "
                                 f"or drop {TABLE_FLAG} to calibrate at start-up", param=TABLE_FLAG)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CostTableError(f"{TABLE_FLAG}={p}: not valid JSON ({e}). Fix: pass a table written by "
                                 f"{OUTPUT_FLAG}", param=TABLE_FLAG) from None
        except OSError as e:
            raise CostTableError(f"{TABLE_FLAG}={p}: cannot read it ({e.strerror})", param=TABLE_FLAG) from None
        table = cls.from_dict(data, str(p), sanity=False)  # a mismatch first: it explains more than a bad cell
        mismatches = compatibility_mismatches(table.metadata, expected)
        if mismatches:
            parts = []
            for name, tv, ev in mismatches:
                why, fix = _FIXES[name]
                fmt = dict(table=_flag_value(tv), engine=_flag_value(ev), engine_flag=_flag_value(ev))
                parts.append(f"{name}: table {_show(tv)}, engine {_show(ev)} -- {why.format(**fmt)}; "
                             f"fix: {fix.format(**fmt)}")
            raise CostTableCompatibilityError(f"{TABLE_FLAG}={p} does not match this engine: " + " | ".join(parts)
                                              + f" ({_RECALIBRATE})", mismatches)
        table.check_sane()
        return table

    # ------------------------------------------------------------------ reporting
    def coverage_lines(self) -> list[str]:
        m = self.metadata
        lines = [f"coverage: request buckets {m.request_buckets}, KV ranges {[list(r) for r in m.kv_ranges]}, "
                 f"cost model {self.model.kind} over Bcap x {m.x_name}"]
        for b, xs in sorted(m.grid.items()):
            lines.append(f"  Bcap {b}: measured {m.x_name} {list(xs)}")
        bad = unusable_cells(self)
        if bad:
            lines.append(f"cells without a positive fitted cost (they run at full width): "
                         f"{', '.join(f'Bcap {b} {m.x_name} {x}' for b, x in bad)}")
        if m.heldout and m.heldout.get("median_rel_error") is not None:
            lines.append(f"held-out median relative error {100 * m.heldout['median_rel_error']:.1f}% over "
                         f"{m.heldout.get('evaluated')} cells ({m.heldout.get('skipped_disconnected', 0)} + "
                         f"{m.heldout.get('skipped_uncovered', 0)} skipped)")
        return lines

    def log_block(self, facts: EngineFacts | None = None, source: str | None = None) -> str:
        """R-F7/R-G2 start-up block for a loaded table: source, saved calibration config, coverage."""
        m = self.metadata
        src = source or self.source or "(in memory)"
        lines = [f"{m.algorithm} adaptive effective configuration",
                 f"source: saved table {src} (created {m.created_at or 'unknown'}; sampling and fitting skipped, "
                 "warm-up still ran)",
                 "saved calibration configuration:", compact_json(m.calibration)]
        lines += self.coverage_lines()
        if facts is not None:
            lines += facts.geometry_lines({b: tuple(x) for b, x in m.grid.items()}, m.x_name)
            uncovered = [b for b in facts.request_buckets if b not in m.request_buckets]
            if uncovered:
                lines.append(f"prepared request buckets {uncovered} are not in the table: they run at full width")
        lines.append(GREEDY_NOTE)
        lines.append(FALLBACK_NOTE)
        return "\n".join(lines)
