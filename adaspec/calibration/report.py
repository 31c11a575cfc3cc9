"""The R-F7 start-up log block of a calibration that is about to run."""

from __future__ import annotations

from .facts import EffectiveCalibration, compact_json
from .schema import FALLBACK_NOTE, GREEDY_NOTE


def effective_log_block(eff: EffectiveCalibration, algorithm: str, source: str) -> str:
    """`<algorithm> adaspec effective configuration`, the source, the effective config with the
    defaults filled in, the prepared geometry and the grid. `source`: "built-in" or "file PATH"."""
    lines = [f"{algorithm} adaptive effective configuration",
             f"source: {source}",
             f"mode: {eff.mode} (cost model {eff.model} over Bcap x {eff.x_name})",
             "effective configuration (every default filled in"
             + (f"; from defaults: {', '.join(eff.defaulted)}" if eff.defaulted else "") + "):",
             compact_json(eff.to_config_dict())]
    lines += eff.facts.geometry_lines(eff.grid, eff.x_name)
    if eff.mode == "adaptive_draft_step":
        lines.append(f"every step count k = 0..{eff.draft_width} is measured independently (R-C3; "
                     "k = 0 is a plain round that only refreshes the draft)")
    lines.append(f"calibration: {eff.num_points} points x {eff.rounds_per_point} rounds "
                 f"({eff.warmup_steps} warm-up + {eff.windows_per_point} windows x {eff.window_steps}); "
                 f"Bcap synthetic requests per point on each of the {eff.facts.dp_size} DP shard(s) (Bcap x "
                 f"{eff.facts.dp_size} in all, R-H1); worst-case progress "
                 f"{eff.worst_case_progress} KV tokens per point")
    lines.append(GREEDY_NOTE)
    lines.append(FALLBACK_NOTE)
    return "\n".join(lines)
