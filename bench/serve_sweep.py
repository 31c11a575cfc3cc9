"""Serving benchmark (issue 9): `adaspec serve` configurations x concurrency levels, one run.

For each configuration: start `adaspec serve` (pinned with `taskset -c CORE`, one thread), wait for
/health, run `adaspec bench-serve` (pinned to the same core) over the concurrency levels, stop the
server with SIGTERM. Prints one table with output tok/s relative to `plain` at the same
concurrency and writes every row (vllm-bench-serve keys) to --json_out and the plot to --plot.

    taskset -c 0 python bench/serve_sweep.py --levels=1,4,8,16 --num_prompts=2,4,8,16 \
        --json_out=bench/results/serving.json --plot=bench/results/serving.png

The adaptive-verify configurations load a cost table calibrated once up front with `adaspec
calibrate` (--calibration, saved under --workdir); adaptive draft step calibrates at its own
start-up (R-C3: step tables are never loaded). Configurations: `--configs=plain,mtp1,...`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

CONFIGS = {
    "plain": [],
    "mtp1": ["--speculative_algorithm=MTP", "--num_speculative_tokens=1"],  # best fixed (BENCHMARKS.md issue 3)
    "mtp_step": ["--speculative_algorithm=MTP", "--num_speculative_tokens=3", "--enable_adaptive_draft_step=true",
                 "--adaptive_draft_step_config={step_cfg}"],
    "dspark7_sync": ["--speculative_algorithm=DSpark", "--num_speculative_tokens=7",
                     "--enable_adaptive_target_verify=true", "--adaptive_target_verify_cost_table={table}"],
    "dspark7_async": ["--speculative_algorithm=DSpark", "--num_speculative_tokens=7",
                      "--enable_adaptive_target_verify=true", "--enable_schedule_overlap=true",
                      "--adaptive_target_verify_cost_table={table}"],
}


def pinned(core: str, args: list[str]) -> list[str]:
    return ["taskset", "-c", core, *args] if core else args


def calibrate_table(core: str, calibration: str, table: Path, dtype: str) -> None:
    if table.exists():
        print(f"[sweep] reusing cost table {table}", file=sys.stderr)
        return
    t0 = time.perf_counter()
    subprocess.run(pinned(core, [sys.executable, "-m", "adaspec.cli", "calibrate", f"--dtype={dtype}",
                                 "--speculative_algorithm=DSpark", "--num_speculative_tokens=7",
                                 "--enable_adaptive_target_verify=true",
                                 f"--adaptive_target_verify_calibration={calibration}",
                                 f"--adaptive_target_verify_cost_table_output={table}", "--plot="]),
                   check=True, stdout=subprocess.DEVNULL)
    print(f"[sweep] calibrated {table} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def start(core: str, flags: list[str], log: Path):
    f = open(log, "w")
    proc = subprocess.Popen(pinned(core, [sys.executable, "-m", "adaspec.cli", "serve", "--port=0", *flags]),
                            stderr=f, stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 1800
    url = None
    while time.monotonic() < deadline and proc.poll() is None:
        if url is None:
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
            url = m.group(1) if m else None
        else:
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--levels", default="1,4,8,16")
    p.add_argument("--num_prompts", default="2,4,8,16", help="measured requests per level")
    p.add_argument("--max_tokens", type=int, default=256)
    p.add_argument("--prompts", default="code,chat,prose,copy")
    p.add_argument("--core", default="0", help="CPU core for server and client (empty = no pinning)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--calibration", default="bench/serve_calibration.json")
    p.add_argument("--step_config", default="bench/serve_draft_step.json")
    p.add_argument("--workdir", default="/tmp/adaspec-serve-sweep")
    p.add_argument("--json_out", default="bench/results/serving.json")
    p.add_argument("--plot", default="bench/results/serving.png")
    p.add_argument("--report_only", action="store_true", help="only print the table and plot of --json_out")
    a = p.parse_args()
    if a.report_only:
        return report(Path(a.json_out), a.plot)
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(a.json_out)
    if out.exists():
        out.unlink()
    names = a.configs.split(",")
    table = work / f"dspark7_{a.dtype}_table.json"
    if any("{table}" in " ".join(CONFIGS[n]) for n in names):
        calibrate_table(a.core, a.calibration, table, a.dtype)
    for name in names:
        flags = [f.format(table=table, step_cfg=a.step_config) for f in CONFIGS[name]] + [f"--dtype={a.dtype}"]
        t0 = time.perf_counter()
        proc, url = start(a.core, flags, work / f"{name}.log")
        print(f"[sweep] {name}: ready after {time.perf_counter() - t0:.0f} s ({' '.join(flags)})", file=sys.stderr)
        try:
            subprocess.run(pinned(a.core, [sys.executable, "-m", "adaspec.cli", "bench-serve", f"--base_url={url}",
                                           f"--concurrency={a.levels}", f"--num_prompts={a.num_prompts}",
                                           f"--max_tokens={a.max_tokens}", "--ignore_eos=true", "--num_warmups=1",
                                           f"--prompts={a.prompts}", f"--label={name}", f"--json_out={out}"]),
                           check=False)
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(120)
            print(f"[sweep] {name}: server exit status {rc}", file=sys.stderr)
    return report(out, a.plot)


def _per_cpu(r: dict) -> float | None:
    """Output tokens per second of server CPU time: the speed on an idle core (1 thread)."""
    cpu = r.get("server_cpu_seconds")
    return r["total_output_tokens"] / cpu if cpu else None


def report(out: Path, plot_path: str) -> int:
    rows = json.loads(out.read_text())
    base = {r["max_concurrency"]: r["output_throughput"] for r in rows if r["label"] == "plain"}
    cpu_base = {r["max_concurrency"]: _per_cpu(r) for r in rows if r["label"] == "plain"}
    print("\n| config | conc. | done/failed | out tok/s | × plain | out tok / server CPU s | × plain | TTFT p50 / p99 ms | TPOT p50 / p99 ms "
          "| accept. rate | accept. len | round time measured / predicted | server CPU s / wall s |")
    print("|" + "---|" * 11)

    def f(x, nd=1):
        return "–" if x is None else f"{x:.{nd}f}"

    for r in rows:
        ratio = r["output_throughput"] / base[r["max_concurrency"]] if base.get(r["max_concurrency"]) else None
        pc, pc0 = _per_cpu(r), cpu_base.get(r["max_concurrency"])
        print(f"| {r['label']} | {r['max_concurrency']} | {r['completed']}/{r['failed']} | {f(r['output_throughput'])} "
              f"| {f(ratio, 2)}× | {f(pc)} | {f(pc / pc0 if pc and pc0 else None, 2)}× | {f(r['median_ttft_ms'], 0)} / {f(r['p99_ttft_ms'], 0)} "
              f"| {f(r['median_tpot_ms'])} / {f(r['p99_tpot_ms'])} | {f(r.get('spec_decode_acceptance_rate'), 3)} "
              f"| {f(r.get('spec_decode_acceptance_length'), 2)} "
              f"| {f(r.get('adaspec_round_time_measured_over_predicted'), 2)} "
              f"| {f(r.get('server_cpu_seconds'))} / {f(r['duration'])} |")
    from adaspec.server.bench_report import plot

    plot(rows, plot_path)
    print(f"\nplot: {plot_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
