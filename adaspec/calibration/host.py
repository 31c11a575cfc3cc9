"""Where a cost table was measured: the processor, the threads and the torch build (saved with the table).

R-G3's compatibility fields (algorithm, width, weights, dtype, kernels, topology, device type) decide
whether a saved table may serve at all, and a mismatch refuses it. They do not say whether its
*numbers* still hold: a table measured with one thread serves an engine with two, or one measured on
another processor of the same device type, loads silently and prices every round wrongly (the
controllers then choose speculation from costs this machine does not have). The table therefore
records its host, and loading it compares that with the engine's: a difference is one warning line in
the log, not a refusal (machines of one kind differ in small ways, and a table a user chose to carry
over may still be close enough; the held-out error of a recalibration says by how much).
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import torch

_FIELDS = (("processor", "processor"), ("threads", "threads"), ("torch", "torch"))


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_identity(device: torch.device | str = "cpu") -> dict[str, Any]:
    """The measuring host: processor (the GPU's name on CUDA), intra-op threads, torch version."""
    device = torch.device(device)
    if device.type == "cuda":
        processor = torch.cuda.get_device_name(device)
    else:
        processor = _cpu_name()
    return {"processor": processor, "threads": torch.get_num_threads(), "torch": torch.__version__}


def host_note(saved: dict[str, Any] | None, current: dict[str, Any], flag: str) -> str | None:
    """One warning line when a loaded table was measured on another host than this engine's, else None
    (also None for a table written before tables recorded their host)."""
    if not saved:
        return None
    diffs = [f"{label} {saved[key]!r} (table) vs {current.get(key)!r} (here)" for key, label in _FIELDS
             if key in saved and saved[key] != current.get(key)]
    if not diffs:
        return None
    return (f"[adaspec] warning: {flag} was measured on another host: {'; '.join(diffs)}. Its costs may not hold "
            f"here, and the adaptive controllers choose from them; to measure this machine, drop {flag} (or write a "
            "new table with --adaptive_target_verify_cost_table_output=NEW_FILE)")
