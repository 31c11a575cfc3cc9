"""Huge pages (adaspec/hugepages.py) against 4 KiB pages, one fresh process per measurement.

Which pages a process's heap gets is fixed when it starts (glibc reads GLIBC_TUNABLES then), so
the two cannot share a process. This script is the one run that holds both: for every repeat and
configuration it starts one child with `glibc.malloc.hugetlb=1` and one without (order alternating),
each builds its engine, warms it up on one prompt and serves the held-out stream once with
continuous batching (bench/common.serve), and reports process-CPU tokens/s, its minor page faults
during the measurement and its AnonHugePages. Medians per configuration and mode, and their ratio.

Configurations (--configs): `plain`, `mtp_kK` (MTP, fixed K draft steps), `dspark_wW` (DSpark,
fixed width W), each at every --batch_sizes entry.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/hugepages.py --configs=plain,mtp_k1 --batch_sizes=1,16 --repeats=4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import log, markdown_table  # noqa: E402
from adaspec import hugepages  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="huge pages vs 4 KiB pages, a fresh process per measurement",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configs", default="plain,mtp_k1", help="comma-separated: plain, mtp_kK, dspark_wW")
    p.add_argument("--batch_sizes", default="1,16", help="comma-separated: most requests running at once")
    p.add_argument("--source", default="mixed", choices=("code", "chat", "prose", "mixed"),
                   help="held-out prompt stream")
    p.add_argument("--num_prompts", type=int, default=4, help="prompts per stream; a stream has max(this, B)")
    p.add_argument("--max_tokens", type=int, default=256, help="new tokens per request (end of sequence ignored)")
    p.add_argument("--repeats", type=int, default=4, help="children per configuration and mode, alternating order")
    p.add_argument("--json_out", default=None, help="write every measurement and the medians to this JSON file")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # "config:B" in a child
    args = p.parse_args(argv)
    args.configs = common.parse_list(args.configs, str, name="configs")
    for c in args.configs:
        engine_of(c, p.error)
    args.batch_sizes = common.parse_list(args.batch_sizes, int, name="batch_sizes")
    for name in ("num_prompts", "max_tokens", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if any(b < 1 for b in args.batch_sizes):
        p.error("--batch_sizes must be >= 1")
    return args


def engine_of(config: str, error=None) -> tuple[str, int | None]:
    """(algorithm, width) of a configuration name."""
    if config == "plain":
        return "none", None
    for prefix, algo in (("mtp_k", "MTP"), ("dspark_w", "DSpark")):
        if config.startswith(prefix) and config[len(prefix):].isdigit() and int(config[len(prefix):]) >= 1:
            return algo, int(config[len(prefix):])
    message = f"--configs: unknown configuration {config!r} (plain, mtp_kK or dspark_wW)"
    if error is not None:
        error(message)  # argparse's error exits
    raise ValueError(message)


def anon_huge_kb() -> int:
    try:
        with open("/proc/self/smaps_rollup") as f:
            return next((int(l.split()[1]) for l in f if l.startswith("AnonHugePages:")), 0)
    except OSError:
        return 0


def child(args) -> int:
    config, B = args.child.rsplit(":", 1)
    B = int(B)
    common.setup_threads(1)
    algo, width = engine_of(config)
    llm = common.build_llm("float32", algo, width, None, max_seqs=B)
    prompts = common.prompt_sets(llm.tokenizer, [args.source], max(args.num_prompts, B), 192, "auto")[args.source]
    common.serve(llm, prompts[:1], 1, 16, ignore_eos=True)  # warm-up
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    run = common.serve(llm, prompts, B, args.max_tokens, ignore_eos=True)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print("RESULT " + json.dumps({"tokens": run.tokens, "cpu_s": run.cpu_s, "wall_s": run.wall_s, "faults": faults,
                                  "anon_huge_mb": anon_huge_kb() // 1024, "outputs": run.outputs}), flush=True)
    return 0


def measure(args, config: str, B: int, huge: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "ADASPEC_HUGEPAGES_REEXEC")}
    env[hugepages.SWITCH] = "1" if huge else "0"
    if huge:
        env["GLIBC_TUNABLES"] = f"{hugepages.TUNABLE}=1"
    cmd = [sys.executable, str(Path(__file__).resolve()), f"--child={config}:{B}", f"--source={args.source}",
           f"--num_prompts={args.num_prompts}", f"--max_tokens={args.max_tokens}"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    if out.returncode or line is None:
        raise SystemExit(f"child {config} B={B} huge={huge} failed (rc {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args)
    mode = hugepages.thp_mode()
    print(f"# huge pages vs 4 KiB pages: {common.machine()}; THP mode {mode}; glibc {hugepages.glibc_version()}",
          flush=True)
    if hugepages.plan({}, sys.platform, mode, hugepages.glibc_version()) is None:
        print("# this machine would not use the tunable (see adaspec/hugepages.py); the two modes are the same")
    t0 = time.perf_counter()
    runs: dict = {}
    for rep in range(args.repeats):
        for config in args.configs:
            for B in args.batch_sizes:
                for huge in ((True, False) if rep % 2 == 0 else (False, True)):
                    r = measure(args, config, B, huge)
                    runs.setdefault((config, B, huge), []).append(r)
                    log(f"  [{time.perf_counter() - t0:5.0f} s] rep {rep + 1} {config} B={B} "
                        f"{'huge' if huge else '4k  '}: {r['tokens'] / r['cpu_s']:6.1f} tok/s CPU, "
                        f"{r['faults']} faults, {r['anon_huge_mb']} MB huge")
    body, summary = [], []
    for config in args.configs:
        for B in args.batch_sizes:
            med = {h: common.median([r["tokens"] / r["cpu_s"] for r in runs[config, B, h]]) for h in (True, False)}
            flt = {h: common.median([r["faults"] for r in runs[config, B, h]]) for h in (True, False)}
            spread = {h: [round(r["tokens"] / r["cpu_s"], 1) for r in runs[config, B, h]] for h in (True, False)}
            same = all(r["outputs"] == runs[config, B, False][0]["outputs"] for h in (True, False)
                       for r in runs[config, B, h])
            summary.append({"config": config, "batch_size": B, "tok_s_huge": med[True], "tok_s_4k": med[False],
                            "ratio": med[True] / med[False], "faults_huge": flt[True], "faults_4k": flt[False],
                            "per_repeat_huge": spread[True], "per_repeat_4k": spread[False], "outputs_equal": same})
            body.append([config, B, f"{med[False]:.1f} ({' '.join(map(str, spread[False]))})",
                         f"{med[True]:.1f} ({' '.join(map(str, spread[True]))})", f"{med[True] / med[False]:.3f}",
                         f"{flt[False]:.0f} / {flt[True]:.0f}", "yes" if same else "NO"])
    print()
    print(markdown_table(["config", "B", "4 KiB: tok/s CPU (per repeat)", "huge: tok/s CPU (per repeat)",
                          "huge / 4 KiB", "faults 4 KiB / huge", "same tokens"], body, "lrllrrl"))
    if args.json_out:
        common.write_json(args.json_out, {"info": common.run_info(args), "summary": summary,
                                          "runs": [{"config": c, "batch_size": b, "huge": h,
                                                    **{k: v for k, v in r.items() if k != "outputs"}}
                                                   for (c, b, h), rs in runs.items() for r in rs]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
