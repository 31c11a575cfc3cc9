"""`adaspec bench-serve`: flags and the run (load levels one after another, warm-up not counted)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from ..flags import finite_float, parse_bool, positive_float
from .bench_client import BenchError

PROMPT_SETS = ("code", "chat", "prose", "copy")


def _levels(value: str) -> list[int]:
    try:
        levels = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}")
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"each value must be >= 1, got {value!r}")  # also --num_prompts
    return levels


def add_bench_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base_url", default="http://127.0.0.1:8000", help="server root (default http://127.0.0.1:8000)")
    p.add_argument("--model", default=None, help="model name to send (default: the first of /v1/models)")
    p.add_argument("--api_key", default=None, help="bearer token, if the server needs one")
    p.add_argument("--endpoint", default="auto", choices=("auto", "chat", "completions"),
                   help="auto: chat prompts to /v1/chat/completions, code and prose to /v1/completions (default)")
    p.add_argument("--prompts", default="code,chat,prose,copy",
                   help=f"comma-separated prompt sets, drawn round-robin: {', '.join(PROMPT_SETS)} "
                        "(held-out prompts shipped with adaspec; default all four)")
    p.add_argument("--num_prompts", type=_levels, default=[32], metavar="N or N1,N2,...",
                   help="measured requests per load level; one value for all, or one per --concurrency level "
                        "(default 32)")
    p.add_argument("--concurrency", type=_levels, default=[8], metavar="C1,C2,...",
                   help="maximum requests in flight; several levels run one after another (default 8)")
    p.add_argument("--request_rate", type=float, default=float("inf"),  # inf is meaningful here; NaN refused below
                   help="Poisson arrivals per second (default inf: all at once, limited by --concurrency)")
    p.add_argument("--max_tokens", type=int, default=256, help="output tokens per request (default 256)")
    p.add_argument("--temperature", type=finite_float, default=0.0, help="sampling temperature (default 0 = greedy)")
    p.add_argument("--ignore_eos", default=False, type=parse_bool, nargs="?",
                   const=True, metavar="true|false",
                   help="ask the server to ignore end-of-sequence, so every request runs --max_tokens (default false)")
    p.add_argument("--num_warmups", type=int, default=2, help="requests sent before the first level, not counted "
                   "(default 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of prompt order and Poisson arrivals (default 0)")
    p.add_argument("--timeout", type=positive_float, default=1800.0, help="seconds per request before it counts as failed")
    p.add_argument("--metrics_url", default=None, help="Prometheus endpoint to scrape (default BASE_URL/metrics)")
    p.add_argument("--label", default="", help="name of this run in the table, JSON and plot")
    p.add_argument("--json_out", default=None, metavar="FILE",
                   help="write the results (vllm-bench-serve key names) here; appends to a list if it exists")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="PNG of tok/s, TPOT and TTFT vs concurrency "
                   "for every run in --json_out (needs matplotlib)")
    p.add_argument("--progress", default=True, type=parse_bool, nargs="?",
                   const=True, metavar="true|false", help="progress bar on stderr (default true)")


def _check(args) -> list[str]:
    sets = [s.strip() for s in args.prompts.split(",") if s.strip()]
    bad = [s for s in sets if s not in PROMPT_SETS]
    if bad or not sets:
        raise BenchError(f"--prompts={args.prompts}: unknown set(s) {bad or 'none'}; allowed: {', '.join(PROMPT_SETS)}",
                         param="--prompts")
    if args.max_tokens < 1:
        raise BenchError(f"--max_tokens={args.max_tokens}: must be >= 1", param="--max_tokens")
    if len(args.num_prompts) not in (1, len(args.concurrency)):
        raise BenchError(f"--num_prompts: give one count or one per --concurrency level ({len(args.concurrency)})",
                         param="--num_prompts")
    if args.num_warmups < 0:
        raise BenchError(f"--num_warmups={args.num_warmups}: must be >= 0", param="--num_warmups")
    if not args.request_rate > 0:
        raise BenchError(f"--request_rate={args.request_rate}: must be > 0 (inf = all at once)", param="--request_rate")
    if args.temperature < 0:
        raise BenchError(f"--temperature={args.temperature}: must be >= 0 (0 = greedy)", param="--temperature")
    for flag in ("model", "api_key", "metrics_url"):
        value = getattr(args, flag)
        if value is not None and not value.strip():
            raise BenchError(f"--{flag}: empty; give a value or drop the flag", param=f"--{flag}")
    for flag in ("base_url", "metrics_url"):
        value = getattr(args, flag)
        if value is not None and not value.startswith(("http://", "https://")):
            raise BenchError(f"--{flag}={value}: not an http:// or https:// URL (e.g. http://127.0.0.1:8000)",
                             param=f"--{flag}")
    _check_outputs(args)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise BenchError("--plot needs matplotlib: pip install 'adaspec[plot]'", param="--plot") from None
    for mod in ("httpx", "prometheus_client"):
        try:
            __import__(mod)
        except ImportError:
            raise BenchError(f"adaspec bench-serve needs {mod}: pip install 'adaspec[server]'") from None
    return sets


def _check_outputs(args) -> None:
    """--json_out and --plot before any request is sent: a results file is appended to, so it must
    hold earlier results; the directories must exist (a finished run is never lost at the end)."""
    from pathlib import Path

    from ..outputs import check_new_file

    if args.json_out is not None:
        if not args.json_out.strip():
            raise BenchError("--json_out: empty; give a file name or drop the flag", param="--json_out")
        args.json_out = str(Path(args.json_out).expanduser())  # `--json_out=~/x.json`: the shell leaves ~ alone
        out = Path(args.json_out)
        if out.is_dir():
            raise BenchError(f"--json_out={args.json_out} is a directory; name a .json file", param="--json_out")
        if out.exists():
            previous_runs(args.json_out)
        else:
            check_new_file(args.json_out, "--json_out", "results file", BenchError)
    if args.plot is not None:
        if not args.plot.strip() or not args.plot.lower().endswith(".png"):
            raise BenchError(f"--plot={args.plot}: the plot is a PNG; give the file a .png name", param="--plot")
        args.plot = str(Path(args.plot).expanduser())
        plot = Path(args.plot)
        if plot.is_dir():
            raise BenchError(f"--plot={args.plot} is a directory; name a .png file", param="--plot")
        if not plot.exists():
            check_new_file(args.plot, "--plot", "plot", BenchError)


def previous_runs(path: str) -> list:
    """The results already in --json_out (a list of runs, or one run)."""
    from ..preflight.paths import read_json

    try:
        old = read_json(path, "--json_out", "results file")
    except BenchError:
        raise
    except Exception as e:  # noqa: BLE001 - InputFileError: say it is our results file that is wrong
        raise BenchError(f"{e}; --json_out appends to earlier bench-serve results, so pass a new file or one "
                         "written by bench-serve", param="--json_out") from None
    runs = old if isinstance(old, list) else [old]
    if not all(isinstance(r, dict) for r in runs):
        raise BenchError(f"--json_out={path} does not hold bench-serve results (a list of objects); pass a new file",
                         param="--json_out")
    return runs


def cmd_bench_serve(args: argparse.Namespace) -> int:
    sets = _check(args)
    from . import bench_client as bc
    from .bench_report import plot, table

    counts = args.num_prompts * len(args.concurrency) if len(args.num_prompts) == 1 else args.num_prompts
    prompts, notes = bc.load_prompts(sets, max(counts) + args.num_warmups, args.seed)
    for note in notes:
        print(f"[adaspec] bench-serve: {note}", file=sys.stderr)
    warm, measured = prompts[:args.num_warmups], prompts[args.num_warmups:]
    rows = asyncio.run(_run(args, warm, measured, counts))
    print(table(rows))
    failed = [(r, e) for r in rows for e in r["errors"]]
    if failed:  # the reason, not only a count (a wrong --model fails every request with the same 400)
        print(f"[adaspec] bench-serve: {len(failed)} request(s) failed; the first: {failed[0][1]}", file=sys.stderr)
    if args.json_out:
        import os

        from ..outputs import replace_file

        runs = previous_runs(args.json_out) if os.path.exists(args.json_out) else []
        runs += rows
        replace_file(args.json_out, json.dumps(runs, indent=1).encode())  # atomic: the earlier runs are never half-lost
        print(f"results written to {args.json_out}", file=sys.stderr)
        rows = runs
    if args.plot:
        print(f"plot written to {plot(rows, args.plot)}", file=sys.stderr)
    return 0 if all(r["failed"] == 0 for r in rows) else 1


async def _run(args, warm, pool, counts) -> list[dict]:
    from . import bench_client as bc
    from .bench_report import acceptance, summarise

    model = args.model or await bc.served_model(args.base_url, args.api_key)
    target = bc.Target(args.base_url, model, args.endpoint, args.api_key, args.max_tokens, args.temperature,
                       args.ignore_eos, args.timeout)
    rows = []
    for level, count in zip(args.concurrency, counts):
        measured = pool[:count]
        if warm and not rows:  # once, before the first level (as vllm bench serve does)
            await bc.run_level(target, warm, level, float("inf"), args.seed)
        before = await bc.scrape(args.base_url, args.metrics_url)
        bar = None
        if args.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(measured), desc=f"{args.label or 'bench'} c={level}", unit="req", file=sys.stderr)
        results, duration = await bc.run_level(target, measured, level, args.request_rate, args.seed, bar)
        if bar is not None:
            bar.close()
        after = await bc.scrape(args.base_url, args.metrics_url)
        row = {"label": args.label, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "model_id": model,
               "endpoint": args.endpoint, "prompts": args.prompts, "num_prompts": len(measured),
               "max_tokens": args.max_tokens, "temperature": args.temperature, "ignore_eos": args.ignore_eos}
        row.update(summarise(results, duration, level, args.request_rate))
        row.update(acceptance(before, after))
        rows.append(row)
    return rows
