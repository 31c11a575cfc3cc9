"""Default-config adaptive start-up: time to ready and the calibration's own report (issue 13).

Runs `adaspec generate` with the built-in calibration defaults (no config file, bundled model, one
thread) pinned to one core, exactly as a user would start it, once per algorithm and load:

- DSpark: `--speculative_algorithm=DSpark --num_speculative_tokens=7 --enable_adaptive_target_verify=true`
- MTP: `--speculative_algorithm=MTP --enable_adaptive_draft_step=true`

`--loads=none,same_core`: `same_core` starts a competing busy loop pinned to the same core for the
whole run (a second process, `python -c "while True: pass"`), so the engine gets about half of
it. Reported per run: wall seconds of the whole command (start-up plus 8 generated tokens),
process CPU seconds (user + system of the child: the wall time of a quiet core), and from the
engine's log the calibration seconds, the points and rounds, the noise summary, the held-out
cost-model error and any warning line. The machine's other load is not controlled: the CPU
seconds and the log's steal share say how busy it was.

    python bench/startup.py --algorithms=DSpark,MTP --loads=none,same_core --core=0 \
        --json_out=bench/results/startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "DSpark": ["--speculative_algorithm=DSpark", "--num_speculative_tokens=7", "--enable_adaptive_target_verify=true"],
    "MTP": ["--speculative_algorithm=MTP", "--enable_adaptive_draft_step=true"],
}
KEEP = ("[adaspec] calibration", "[adaspec] held-out", "[adaspec] WARNING", "[adaspec] warm-up", "  Bcap ",
        "sparse CPU geometry")


def run_once(algo: str, load: str, core: int) -> dict:
    cmd = ["taskset", "-c", str(core), sys.executable, "-m", "adaspec.cli", "generate", "--prompt=Hi",
           "--max_tokens=8", *COMMANDS[algo]]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    hog = None
    if load == "same_core":
        hog = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"])
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err, tempfile.TemporaryFile("w+") as out:
        try:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
            _, status, usage = os.wait4(proc.pid, 0)  # the engine's own rusage, not the hog's
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        wall = time.perf_counter() - t0
        err.seek(0)
        stderr = err.read()
    rc = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    log = [ln for ln in stderr.replace("\r", "\n").splitlines() if ln.startswith(KEEP)]
    cal = next((ln for ln in log if ln.startswith("[adaspec] calibration:")), "")
    m = re.search(r"in ([0-9.]+) s", cal)
    held = next((ln for ln in log if ln.startswith("[adaspec] held-out")), "")
    hm = re.search(r"median ([0-9.]+)%", held)
    return {"algorithm": algo, "load": load, "rc": rc, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "calibration_s": float(m.group(1)) if m else None,
            "heldout_median_pct": float(hm.group(1)) if hm else None, "log": log,
            "command": " ".join(cmd)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algorithms", default="DSpark,MTP", help="comma-separated: DSpark, MTP")
    p.add_argument("--loads", default="none,same_core", help="comma-separated: none, same_core")
    p.add_argument("--core", type=int, default=0, help="the core to pin to (never 1: the draft-training job's)")
    p.add_argument("--json_out", default=None, help="write the results here")
    args = p.parse_args(argv)
    results = []
    for load in args.loads.split(","):
        for algo in args.algorithms.split(","):
            r = run_once(algo, load, args.core)
            results.append(r)
            print(f"## {algo}, load {load}: rc {r['rc']}, ready in {r['wall_s']} s wall, CPU {r['cpu_s']} s, "
                  f"calibration {r['calibration_s']} s, held-out median {r['heldout_median_pct']}%", flush=True)
            for ln in r["log"]:
                print("   " + ln, flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
