"""What the engine prepared (`EngineFacts`) and the calibration that will run (`EffectiveCalibration`).

`EffectiveCalibration` is immutable: every default filled in, every rule of R-F4/R-F5 checked by
the resolvers (`resolve.py`) before any sampling. Its R-F7 log block is rendered by `report.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

from .schema import IN_FLIGHT_ROUNDS, ContextRange, DraftStepPolicy



@dataclass(frozen=True)
class EngineFacts:
    """What the engine prepared at warm-up and the limits calibration must respect (filled by the engine).

    `target_rows[bcap]` lists the legal prepared target-row buckets G of that request bucket, the
    full-width bucket being the largest (split: Bcap..Bcap*(w+1); unified: the R-F6 bindings).
    `request_buckets` are per DP shard (R-H1)."""

    num_speculative_tokens: int  # w (adaptive verify) or k_max (adaptive draft step)
    request_buckets: tuple[int, ...]  # prepared request buckets (per DP shard)
    model_context_limit: int  # --max_model_len: prompt + output tokens per request
    kv_capacity_per_slot: int  # KV cache tokens one request slot can hold
    target_rows: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # needed for adaptive verify
    dp_size: int = 1
    unified: bool = False

    def __post_init__(self):
        object.__setattr__(self, "request_buckets", tuple(sorted(set(int(b) for b in self.request_buckets))))
        object.__setattr__(self, "target_rows",
                           {int(b): tuple(sorted(set(int(g) for g in gs))) for b, gs in dict(self.target_rows).items()})
        if self.num_speculative_tokens < 1 or not self.request_buckets:
            raise ValueError("EngineFacts needs num_speculative_tokens >= 1 and at least one request bucket")

    @classmethod
    def from_geometry(cls, geometry, *, model_context_limit: int, kv_capacity_per_slot: int,
                      dp_size: int = 1, num_speculative_tokens: int | None = None) -> "EngineFacts":
        """From an object with `request_buckets`, `target_rows`, `width`, `unified` (adaspec.geometry.PreparedGeometry)."""
        return cls(num_speculative_tokens or geometry.width, tuple(geometry.request_buckets), model_context_limit,
                   kv_capacity_per_slot, dict(geometry.target_rows), dp_size, bool(geometry.unified))

    def full_width_rows(self, bcap: int) -> int | None:
        rows = self.target_rows.get(bcap)
        return max(rows) if rows else None

    def geometry_lines(self, grid: Mapping[int, Iterable[int]] | None = None, x_name: str = "G") -> list[str]:
        layout = "unified" if self.unified else "split"
        lines = [f"prepared geometry: layout {layout}, dp_size {self.dp_size}, request buckets "
                 f"{list(self.request_buckets)} (per DP shard), context limit {self.model_context_limit}, "
                 f"KV capacity per slot {self.kv_capacity_per_slot}"]
        for b in self.request_buckets:
            rows = list(self.target_rows.get(b, ()))
            parts = [f"prepared G {rows}"] if rows else []
            if grid is not None:
                cal = grid.get(b)
                parts.append(f"calibrated {x_name} {list(cal)}" if cal else "not calibrated (runs at full width)")
            lines.append(f"  Bcap {b}: " + "; ".join(parts))
        return lines


def compact_json(d: Mapping) -> str:
    """A JSON object with one top-level key per line and compact values (for logs)."""
    if not d:
        return "{}"
    body = ",\n".join(f"  {json.dumps(str(k))}: {json.dumps(v, separators=(', ', ': '))}" for k, v in d.items())
    return "{\n" + body + "\n}"


def worst_case_progress_tokens(warmup_steps: int, window_steps: int, windows_per_point: int, width: int) -> int:
    """KV tokens one calibration request can gain at a point: every measured round accepting all
    `width` drafts plus the bonus token, and two further rounds in flight (R-F4)."""
    return (warmup_steps + windows_per_point * window_steps + IN_FLIGHT_ROUNDS) * (width + 1)


# ----------------------------------------------------------------------------- effective configuration

Mode = Literal["adaptive_target_verify", "adaptive_draft_step"]


def mode_axis(mode: str) -> str:
    """The second axis of a cost table: "g" (target rows, adaptive verify) or "k" (draft steps)."""
    return "g" if mode == "adaptive_target_verify" else "k"


@dataclass(frozen=True)
class EffectiveCalibration:
    """The calibration that will run, every default filled in and validated (R-F3..R-F5, R-C5)."""

    mode: str
    model: str
    draft_width: int  # w (verify) or k_max (draft step)
    request_buckets: tuple[int, ...]
    grid: Mapping[int, tuple[int, ...]]  # Bcap -> G values (verify) or step counts k (draft step)
    contexts: tuple[ContextRange, ...]
    warmup_steps: int
    window_steps: int
    windows_per_point: int
    token_seed: int
    facts: EngineFacts
    policy: DraftStepPolicy | None = None  # draft step only
    defaulted: tuple[str, ...] = ()  # fields that came from the built-in defaults

    @property
    def axis(self) -> str:
        """Name of the second table axis: "g" (target rows) or "k" (draft steps)."""
        return mode_axis(self.mode)

    @property
    def x_name(self) -> str:
        return "G" if self.axis == "g" else "k"

    @property
    def worst_case_progress(self) -> int:
        return worst_case_progress_tokens(self.warmup_steps, self.window_steps, self.windows_per_point,
                                          self.draft_width)

    @property
    def kv_ranges(self) -> tuple[tuple[int, int], ...]:
        return tuple((c.min_kv_length, c.max_kv_length) for c in self.contexts)

    def context_tuples(self) -> list[tuple[int, int, int]]:
        """(prefill_tokens, min_kv_length, max_kv_length) per context range."""
        return [(c.prefill_tokens, c.min_kv_length, c.max_kv_length) for c in self.contexts]

    def synthetic_requests(self, bcap: int) -> int:
        """Synthetic requests a point at request bucket `bcap` builds over all DP shards: buckets are per
        shard (R-H1), so DP=2 at bucket 4 builds 8, 4 on each shard (`shard_requests`)."""
        return bcap * self.facts.dp_size

    def shard_requests(self, bcap: int) -> int:
        """Synthetic requests one DP shard's engine builds for a point at request bucket `bcap`."""
        return bcap

    def points(self) -> list[tuple[int, int, int]]:
        """(context index, bcap, x) of every calibration point, in measuring order."""
        return [(i, b, x) for i in range(len(self.contexts)) for b in self.request_buckets for x in self.grid[b]]

    @property
    def num_points(self) -> int:
        return len(self.contexts) * sum(len(self.grid[b]) for b in self.request_buckets)

    @property
    def rounds_per_point(self) -> int:
        return self.warmup_steps + self.windows_per_point * self.window_steps

    def calibration_dict(self) -> dict:
        d: dict[str, Any] = {"model": self.model}
        if self.mode == "adaptive_target_verify":
            d["draft_width"] = self.draft_width
        d["request_buckets"] = list(self.request_buckets)
        if self.mode == "adaptive_target_verify":
            d["target_graph_rows"] = {str(b): list(self.grid[b]) for b in self.request_buckets}
        d["contexts"] = [c.model_dump() for c in self.contexts]
        d.update(warmup_steps=self.warmup_steps, window_steps=self.window_steps,
                 windows_per_point=self.windows_per_point, token_seed=self.token_seed)
        return d

    def to_config_dict(self) -> dict:
        """The effective configuration as JSON data; loading it back as a file reproduces this calibration."""
        if self.mode == "adaptive_target_verify":
            return self.calibration_dict()
        return {"version": 1, "policy": self.policy.model_dump() if self.policy else DraftStepPolicy().model_dump(),
                "calibration": self.calibration_dict()}

    def log_block(self, algorithm: str, source: str) -> str:
        """The R-F7 start-up block. `source`: "built-in", "file PATH" or "saved table PATH"."""
        from .report import effective_log_block

        return effective_log_block(self, algorithm, source)
