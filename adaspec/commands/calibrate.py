"""`adaspec calibrate`: warm up and calibrate exactly as serving would, print the table, plot the fit.

Every output path (`--adaptive_target_verify_cost_table_output`, `--plot`) is checked before the
model loads, so a finished calibration is never lost to a bad path; the table is written as soon
as it is fitted (before the plot), and neither file is ever overwritten or left half-written.
"""

from __future__ import annotations

import json
import sys

from ..config import ConfigError
from ..errors import UserError
from ..preflight import preflight
from .generate import warn


def check_plot_path(path: str) -> None:
    if not path.lower().endswith(".png"):
        raise UserError(f"--plot={path}: the plot is a PNG; give the file a .png name (or --plot= for no plot)",
                        param="--plot")
    from ..calibration.plot import PlotUnavailableError, _matplotlib

    try:
        _matplotlib()
    except PlotUnavailableError as e:
        raise UserError(f"--plot={path}: {e}; or pass --plot= for no plot", param="--plot") from None


def _have_matplotlib() -> bool:
    from ..calibration.plot import PlotUnavailableError, _matplotlib

    try:
        _matplotlib()
    except PlotUnavailableError:
        return False
    return True


def cmd_calibrate(args, engine_config) -> int:
    config = engine_config(args)
    if not config.adaptive:
        raise ConfigError("calibrate needs --enable_adaptive_target_verify=true or --enable_adaptive_draft_step=true "
                          "(with --speculative_algorithm=MTP, DSpark, Suffix or MTP+Suffix)", param="--enable_adaptive_target_verify")
    if args.plot and "--plot" not in getattr(args, "explicit_flags", {"--plot"}) and not _have_matplotlib():
        # the default plot needs an optional package: skip it (said up front) rather than refuse (issue 9)
        print("adaspec calibrate: note: matplotlib is not installed, so no plot is drawn "
              "(pip install 'adaspec[plot]' for calibration.png)", file=sys.stderr)
        args.plot = ""
    if args.plot:
        check_plot_path(args.plot)
    checked = preflight(config, outputs={"--plot": args.plot or None})
    notes = list(checked.warnings)
    if config.enable_schedule_overlap:
        notes.append("--enable_schedule_overlap=true has no effect on calibrate: calibration drives its rounds "
                     "synchronously and nothing is served afterwards")
    if config.seed != 0:
        notes.append(f"--seed={config.seed} has no effect on calibrate: calibration requests are greedy")
    warn("calibrate", notes)
    from ..engine.llm_engine import LLMEngine

    engine = LLMEngine(config, checked=checked)
    table = engine.control.table
    print(json.dumps({"source": table.source or "calibrated now",
                      "calibration_seconds": round(engine.control.calibration_seconds, 2),
                      "metadata": table.metadata.model_dump(mode="json", exclude={"calibration"}),
                      "model": table.model.to_dict()}, indent=1))
    for line in table.coverage_lines():
        print(line)
    if args.plot:
        from ..calibration.plot import plot_fit

        print(f"plot written to {plot_fit(table, args.plot)}")
    return 0
