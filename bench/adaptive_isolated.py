"""bench/adaptive.py --isolate: every measurement in a fresh child process (issue 13).

Inside one process, which engine was built when moves a run by up to ~7% (BENCHMARKS.md, issue 13:
"Is the 0.96x cell the engine or the bench?"), more than the 2-3% the adaptive modes' targets are
about. With --isolate the driver runs each (dtype, batch size, stream, configuration, repeat) as
`bench/adaptive.py <same flags> --child_spec=JSON`: the child builds only that configuration's
engine (adaptive-verify engines load the cost table the first child of their family calibrated and
saved in --table_dir; the draft step calibrates in every child, R-C3), warms it up, measures one
run exactly as the in-process bench does (bench/adaptive_hooks.measure) and prints it as one JSON
line. The driver alternates the order over repeats as before; the oracle reads the plain run's
greedy outputs from a file the driver writes. The children's process CPU time is the clock.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from bench import common
from bench.adaptive_configs import config_kind


def child_main(args, build_engines, files: dict, table_dir: Path) -> int:
    """In the child: one run of the spec'd configuration; prints {"run": ..., "calibration": ...}."""
    from bench.adaptive_hooks import measure

    spec = json.loads(args.child_spec)
    args.configs, args.dtypes = [spec["name"]], [spec["dtype"]]
    engines, calib = build_engines(args, spec["dtype"], files, table_dir)
    sets = common.warmed_prompt_sets(engines, args)
    stream = sets[spec["source"]][: max(args.num_prompts, spec["B"])]
    reference = None
    if spec.get("reference"):
        outputs = json.loads(Path(spec["reference"]).read_text())
        reference = {p.ids: o for p, o in zip(stream, outputs)}
    llm = engines[config_kind(spec["name"])["engine"]]
    gap = args.arrival_gap if spec["source"] == "staggered" else 0.0
    run = measure(args, llm, spec["name"], stream, spec["B"], reference, gap)
    print(json.dumps({"run": dataclasses.asdict(run), "calibration": calib.get(config_kind(spec["name"])["engine"])}),
          flush=True)
    return 0


class IsolatedRunner:
    """The driver's side: one child process per measurement."""

    def __init__(self, argv: list[str], workdir: Path, table_dir: Path):
        drop = ("--isolate", "--child_spec", "--json_out", "--plot_dir", "--table_dir")
        keep = [a for a in argv if not a.startswith(drop)]
        if any(a in drop[1:] for a in argv):  # "--table_dir DIR": its value would stay behind
            raise SystemExit("--isolate: pass --child_spec/--json_out/--plot_dir/--table_dir as --flag=value")
        self.base = [sys.executable, str(Path(__file__).resolve().parent / "adaptive.py")] + keep + [
            "--plot_dir=", f"--table_dir={table_dir}"]
        self.workdir = workdir
        self.calibration: dict[tuple[str, str], dict] = {}

    def measure(self, dtype: str, name: str, source: str, B: int, reference: list | None) -> common.Run:
        spec = {"dtype": dtype, "name": name, "source": source, "B": B}
        if reference is not None and config_kind(name)["hook"] and config_kind(name)["hook"][0] == "oracle":
            path = self.workdir / f"reference_{dtype}_{source}_{B}.json"  # one per cell: its plain run
            if not path.exists():
                path.write_text(json.dumps(reference))
            spec["reference"] = str(path)
        res = subprocess.run(self.base + [f"--child_spec={json.dumps(spec)}"], capture_output=True, text=True)
        if res.returncode != 0:
            tail = "\n".join(res.stderr.strip().splitlines()[-15:])
            raise SystemExit(f"[bench] child run {spec} failed (exit {res.returncode}):\n{tail}")
        out = json.loads(res.stdout.strip().splitlines()[-1])
        if out["calibration"] is not None:
            self.calibration.setdefault((dtype, config_kind(name)["engine"]), out["calibration"])
        return common.Run(**out["run"])
