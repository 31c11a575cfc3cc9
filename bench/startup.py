"""Default-config adaptive start-up: time to ready and the calibration's own report (issue 13).

Runs `adaspec generate` with the built-in calibration defaults (no config file, bundled model, one
thread) pinned to one core, exactly as a user would start it, once per algorithm and load:

- DSpark: `--speculative_algorithm=DSpark --num_speculative_tokens=7 --enable_adaptive_target_verify=true`
- MTP: `--speculative_algorithm=MTP --enable_adaptive_draft_step=true`

`--loads=none,same_core,other_core`: `same_core` starts a competing busy loop pinned to the same
core for the whole run (a second process, `python -c "while True: pass"`), so the engine gets
about half of it; `other_core` pins the same loop to the next core (it shares the machine, not the
core). Reported per run: wall seconds of the whole command (start-up plus 8 generated tokens),
process CPU seconds (user + system of the child: the wall time of a quiet core), and from the
engine's log the calibration seconds, the points and rounds, the noise summary, the held-out
cost-model error and any warning line. The machine's other load is not controlled: the CPU
seconds and the log's steal share say how busy it was.

`--prompts=1,16` runs each command with that many prompts: `generate` gives the engine one request
slot per prompt below `--max_seqs_per_batch` (16), so one prompt calibrates request bucket 1 only
and 16 prompts calibrate what a server would (1, 4, 16). `--repeats` runs the whole set again, in
the same order, and the summary gives each configuration's median.

    python bench/startup.py --algorithms=DSpark,MTP --loads=none,same_core --core=0 \
        --json_out=bench/results/startup.json
    python bench/startup.py --loads=none --prompts=1,16 --repeats=3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
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


def run_once(algo: str, load: str, core: int, prompts: int = 1) -> dict:
    cmd = ["taskset", "-c", str(core), sys.executable, "-m", "adaspec.cli", "generate", *["--prompt=Hi"] * prompts,
           "--max_tokens=8", *COMMANDS[algo]]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    hog = None
    if load in ("same_core", "other_core"):
        hog_core = core if load == "same_core" else (core + 1) % (os.cpu_count() or 2)
        hog = subprocess.Popen(["taskset", "-c", str(hog_core), sys.executable, "-c", "while True: pass"])
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
    return {"algorithm": algo, "load": load, "prompts": prompts, "rc": rc, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "calibration_s": float(m.group(1)) if m else None,
            "heldout_median_pct": float(hm.group(1)) if hm else None, "log": log,
            "command": " ".join(cmd)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algorithms", default="DSpark,MTP", help="comma-separated: DSpark, MTP")
    p.add_argument("--loads", default="none,same_core", help="comma-separated: none, same_core, other_core")
    p.add_argument("--core", type=int, default=0, help="the core to pin the command to (other_core loads the next one)")
    p.add_argument("--prompts", default="1", help="comma-separated prompt counts per command (1 = one request slot)")
    p.add_argument("--repeats", type=int, default=1, help="run the whole set this many times (medians in the summary)")
    p.add_argument("--json_out", default=None, help="write the results here")
    args = p.parse_args(argv)
    results = []
    for rep in range(args.repeats):
        for load in args.loads.split(","):
            for prompts in (int(n) for n in args.prompts.split(",")):
                for algo in args.algorithms.split(","):
                    r = run_once(algo, load, args.core, prompts)
                    r["repeat"] = rep + 1
                    results.append(r)
                    print(f"## {algo}, load {load}, {prompts} prompt(s), repeat {rep + 1}: rc {r['rc']}, ready in "
                          f"{r['wall_s']} s wall, CPU {r['cpu_s']} s, calibration {r['calibration_s']} s, held-out "
                          f"median {r['heldout_median_pct']}%", flush=True)
                    for ln in r["log"]:
                        print("   " + ln, flush=True)
    print("\n| algorithm | load | prompts | runs | median wall s | median CPU s | median calibration s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    groups: dict = {}
    for r in results:
        groups.setdefault((r["algorithm"], r["load"], r["prompts"]), []).append(r)
    for (algo, load, prompts), rs in groups.items():
        cal = [r["calibration_s"] for r in rs if r["calibration_s"] is not None]
        print(f"| {algo} | {load} | {prompts} | {len(rs)} | {statistics.median(r['wall_s'] for r in rs):.1f} | "
              f"{statistics.median(r['cpu_s'] for r in rs):.1f} | {'%.1f' % statistics.median(cal) if cal else '-'} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
