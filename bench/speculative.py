"""Speculative decoding vs plain decoding on held-out prompts (issue 3, item 8).

In one process: plain decoding, MTP with k = 1..5 draft steps and DSpark with width w = 5 and 7
(the shipped drafts unless --mtp_draft / --dspark_draft say otherwise), at several batch sizes, in
float32 (on each --linear_backends kernel, issue 14) and bfloat16, on held-out code, chat and prose prompts (`adaspec.training.corpus.
heldout_prompts`: text `adaspec train-draft` never reads). Greedy, at most --max_tokens new tokens
per request; end of sequence is honoured unless --ignore_eos, so tokens/s counts the tokens
actually produced.

Method. All engines of one dtype live in the process at once (sharing one copy of the target
weights, bench/common.py). For every (dtype, batch size B, source) cell, the prompt stream
(max(--num_prompts, B) prompts) is served by each configuration with continuous batching, at most
B requests running; one measurement = the whole stream, prefill included. Measurements are
repeated --repeats times, the order of configurations alternating (forward, reversed, ...), and
medians are reported. Two clocks: wall time and the process's CPU time (robust to other jobs on a
shared core); ratios use --clock.

Exactness. Every speculative run's tokens are compared with plain greedy tokens of the same cell.
In float32 they must be identical: any difference prints a `MISMATCH` line (never hidden). In
bfloat16 differently shaped products may round differently and flip a near-tie, so differences
are counted and reported as notes.

    taskset -c 0 python bench/speculative.py --batch_sizes=1,4,16 --dtypes=float32,bfloat16 \
        --num_prompts=4 --max_tokens=48 --repeats=1 --json_out=bench/results/speculative.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import fmt, fmt_positions, fmt_ratio, log, markdown_table, median  # noqa: E402

ALL_CONFIGS = ("plain", "mtp1", "mtp2", "mtp3", "mtp4", "mtp5", "dspark5", "dspark7")


def parse_config(name: str) -> tuple[str, int | None]:
    """"plain" -> ("none", None); "mtp3" -> ("MTP", 3); "dspark7" -> ("DSpark", 7); "suffix5" ->
    ("Suffix", 5); "mtp+suffix3" -> ("MTP+Suffix", 3) (issue 10)."""
    if name == "plain":
        return "none", None
    for prefix, algo in (("mtp+suffix", "MTP+Suffix"), ("suffix", "Suffix")):
        if name.startswith(prefix) and name[len(prefix):].isdigit() and 1 <= int(name[len(prefix):]) <= 16:
            return algo, int(name[len(prefix):])
    if name.startswith("mtp") and name[3:].isdigit() and int(name[3:]) >= 1:
        return "MTP", int(name[3:])
    if name.startswith("dspark") and name[6:] in ("5", "7"):
        return "DSpark", int(name[6:])
    raise SystemExit(f"--configs: unknown configuration {name!r} (plain, mtpK with K >= 1, dspark5, dspark7, suffixK, "
                     "mtp+suffixK with K = 1..16)")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="plain vs MTP k=1..5 vs DSpark w=5/7: greedy output tokens/s and acceptance on held-out prompts",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configs", default=",".join(ALL_CONFIGS),
                   help="comma-separated: plain, mtpK (K draft steps), dspark5, dspark7; plain is always added "
                        "(it is the baseline and the greedy reference)")
    p.add_argument("--batch_sizes", default="1,4,16", help="comma-separated: most requests running at once")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32, bfloat16")
    p.add_argument("--linear_backends", default="fp32",
                   help="comma-separated --linear_backend values run side by side for float32 (auto, fp32, fp16w, "
                        "bf16, int8; issue 14); bfloat16 always runs its own kernels")
    p.add_argument("--sources", default="code,chat,prose",
                   help="comma-separated held-out prompt sources: code, chat, prose, copy (copy-heavy chat prompts, "
                        "issue 10; never cut), mixed (interleaves code, chat and prose)")
    p.add_argument("--num_prompts", type=int, default=4,
                   help="prompts per stream; a stream has max(num_prompts, B) prompts so that B requests can run")
    p.add_argument("--max_tokens", type=int, default=64, help="new tokens per request at most (greedy)")
    p.add_argument("--ignore_eos", action="store_true", help="generate exactly --max_tokens tokens per request")
    p.add_argument("--repeats", type=int, default=2,
                   help="measurements per configuration and cell, alternating the order; medians are reported")
    p.add_argument("--prompt_tokens", type=int, default=192,
                   help="prompts are cut to this many tokens (as the draft trainer cuts its prompts)")
    p.add_argument("--chat_template", default="auto", choices=("auto", "all", "none"),
                   help="auto: chat prompts with the chat template, code/prose as raw text (as in draft training); "
                        "all/none: force it on/off for every prompt")
    p.add_argument("--mtp_draft", default=None, help="MTP draft directory (default: the shipped draft)")
    p.add_argument("--dspark_draft", default=None, help="DSpark draft directory (default: the shipped draft)")
    p.add_argument("--max_model_len", type=int, default=512, help="context limit per request (KV cache size)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 recommended, see NOTES.md)")
    p.add_argument("--clock", default="cpu", choices=("cpu", "wall"),
                   help="clock for ratios: process CPU time (robust on a shared core) or wall time")
    p.add_argument("--json_out", default=None, help="write every measurement and the summary to this JSON file")
    args = p.parse_args(argv)
    args.configs = common.parse_list(args.configs, str, name="configs")
    for c in args.configs:
        parse_config(c)
    if "plain" in args.configs:
        args.configs.remove("plain")
    args.configs = ["plain"] + args.configs
    args.batch_sizes = common.parse_list(args.batch_sizes, int, name="batch_sizes")
    args.dtypes = common.parse_list(args.dtypes, str, ("float32", "bfloat16"), name="dtypes")
    args.linear_backends = common.parse_list(args.linear_backends, str, ("auto", "fp32", "fp16w", "bf16", "int8"),
                                             name="linear_backends")
    args.sources = common.parse_list(args.sources, str, ("code", "chat", "prose", "copy", "mixed"), name="sources")
    for name in ("num_prompts", "max_tokens", "repeats", "threads", "prompt_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if min(args.batch_sizes) < 1:
        p.error("--batch_sizes must be >= 1")
    return args


def build_engines(args, dtype: str, backend: str = "fp32") -> dict:
    engines = {}
    for name in args.configs:
        algo, width = parse_config(name)
        draft = args.mtp_draft if algo in ("MTP", "MTP+Suffix") else args.dspark_draft if algo == "DSpark" else None
        t0 = time.perf_counter()
        engines[name] = common.build_llm(dtype, algo, width, draft, max_seqs=max(args.batch_sizes),
                                         max_model_len=args.max_model_len, threads=args.threads,
                                         linear_backend=backend)
        log(f"[bench] {dtype} {name}: engine ready in {time.perf_counter() - t0:.1f} s "
            f"(linear backend {engines[name].engine.linear_backend}, layer kernels {engines[name].engine.layer_kernels})")
    return engines


def targets(args) -> list[tuple[str, str]]:
    """(dtype, --linear_backend) pairs: every backend for float32, the dtype's own kernels otherwise."""
    return [(d, b) for d in args.dtypes for b in (args.linear_backends if d == "float32" else ["auto"])]


def label(dtype: str, backend: str) -> str:
    return dtype if backend in ("auto", "fp32") and dtype != "float32" else f"{dtype}/{backend}"


def summarize_cell(args, dtype, B, source, runs: dict, backend: str = "fp32") -> list[dict]:
    """Median per configuration, ratio to plain, exactness against plain."""
    clock = "cpu_s" if args.clock == "cpu" else "wall_s"
    ref = runs["plain"][0].outputs
    base = median([r.tokens / getattr(r, clock) for r in runs["plain"]])
    rows = []
    for name, rs in runs.items():
        tok_s = {c: median([r.tokens / getattr(r, c) for r in rs]) for c in ("wall_s", "cpu_s")}
        st = rs[0].stats
        cmp = common.compare_tokens(rs[0].outputs, ref)
        same_between_repeats = all(r.outputs == rs[0].outputs for r in rs)
        row = {
            "dtype": dtype, "linear_backend": backend, "target": label(dtype, backend),
            "batch_size": B, "source": source, "config": name,
            "requests": len(ref), "tokens": rs[0].tokens,
            "wall_tok_s": tok_s["wall_s"], "cpu_tok_s": tok_s["cpu_s"],
            "ratio_to_plain": (tok_s[clock] / base) if base else None,
            "tpot_ms": median([median(r.tpot_ms) for r in rs]),
            "acceptance_length": st["mean_acceptance_length"], "acceptance_rate": st["acceptance_rate"],
            "per_position_acceptance": st["per_position_acceptance"],
            "equal_to_plain": cmp, "stable_across_repeats": same_between_repeats,
            "raw": [{"wall_s": r.wall_s, "cpu_s": r.cpu_s, "tokens": r.tokens} for r in rs],
        }
        if name != "plain" and cmp["equal"] != cmp["sequences"]:
            where = cmp["first_difference"]
            if dtype == "float32":
                print(f"MISMATCH: {label(dtype, backend)} B={B} {source} {name}: {cmp['sequences'] - cmp['equal']}/{cmp['sequences']} "
                      f"sequences differ from plain greedy (first at prompt {where[0]}, token {where[1]})", flush=True)
            else:
                print(f"note: {label(dtype, backend)} B={B} {source} {name}: {cmp['sequences'] - cmp['equal']}/{cmp['sequences']} "
                      f"sequences differ from plain greedy (bfloat16 rounding; first at prompt {where[0]}, "
                      f"token {where[1]})", flush=True)
        if not same_between_repeats:
            print(f"note: {label(dtype, backend)} B={B} {source} {name}: greedy output changed between repeats", flush=True)
        rows.append(row)
    return rows


def print_tables(args, rows: list[dict]) -> None:
    clock = "CPU" if args.clock == "cpu" else "wall"
    for tgt in dict.fromkeys(r["target"] for r in rows):
        for source in args.sources:
            sel = [r for r in rows if r["target"] == tgt and r["source"] == source]
            if not sel:
                continue
            print(f"\n### {tgt}, {source} prompts (max_tokens {args.max_tokens}; ratio = tok/s over plain, {clock} clock)\n")
            head = ["B", "config", "tok/s wall", "tok/s CPU", "× plain", "TPOT ms", "acc. length", "acc. rate",
                    "per-position acceptance", "= plain"]
            body = []
            for r in sel:
                eq = r["equal_to_plain"]
                body.append([r["batch_size"], r["config"], fmt(r["wall_tok_s"]), fmt(r["cpu_tok_s"]),
                             fmt_ratio(r["ratio_to_plain"]), fmt(r["tpot_ms"]), fmt(r["acceptance_length"], 2),
                             fmt(r["acceptance_rate"], 2), fmt_positions(r["per_position_acceptance"]),
                             f"{eq['equal']}/{eq['sequences']}"])
            print(markdown_table(head, body, "rl" + "r" * 6 + "lr"))
    print("\n### best speculative configuration per cell\n")
    head = ["target", "source", "B", "plain tok/s", "best", "tok/s", "× plain", "acc. length"]
    body = []
    key = "cpu_tok_s" if args.clock == "cpu" else "wall_tok_s"
    for tgt in dict.fromkeys(r["target"] for r in rows):
        for source in args.sources:
            for B in args.batch_sizes:
                cell = [r for r in rows if (r["target"], r["source"], r["batch_size"]) == (tgt, source, B)]
                sel = [r for r in cell if r["config"] != "plain" and r["ratio_to_plain"] is not None]
                plain = next((r for r in cell if r["config"] == "plain"), None)
                if sel:
                    best = max(sel, key=lambda r: r["ratio_to_plain"])
                    body.append([tgt, source, B, fmt(plain[key]) if plain else "–", best["config"], fmt(best[key]),
                                 fmt_ratio(best["ratio_to_plain"]), fmt(best["acceptance_length"], 2)])
    print(markdown_table(head, body, "llrrlrrr"))


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(args.threads)
    common.share_target_weights()
    info = common.run_info(args)
    present = common.shipped_drafts_present()
    if (args.mtp_draft is None and any(c.startswith("mtp") for c in args.configs) and not present["mtp"]) or \
            (args.dspark_draft is None and any(c.startswith("dspark") for c in args.configs) and not present["dspark"]):
        log(f"[bench] shipped drafts present: {present}; pass --mtp_draft/--dspark_draft or drop those configs")
    print(f"# speculative decoding bench: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    print(f"# configs={','.join(args.configs)} batch_sizes={args.batch_sizes} dtypes={args.dtypes} "
          f"sources={args.sources} num_prompts={args.num_prompts} max_tokens={args.max_tokens} "
          f"repeats={args.repeats} clock={args.clock}", flush=True)
    t_start = time.perf_counter()
    all_rows: list[dict] = []
    for dtype, backend in targets(args):
        engines = build_engines(args, dtype, backend)
        sets = common.warmed_prompt_sets(engines, args)
        for B in args.batch_sizes:
            for source in args.sources:
                stream = sets[source][: max(args.num_prompts, B)]
                runs: dict[str, list] = {name: [] for name in args.configs}
                for rep in range(args.repeats):
                    order = common.alternating(args.configs, rep)
                    for name in order:
                        run = common.serve(engines[name], stream, B, args.max_tokens, args.ignore_eos)
                        runs[name].append(run)
                        acc = run.stats["mean_acceptance_length"]
                        log(f"  [{time.perf_counter() - t_start:6.0f} s] {label(dtype, backend)} B={B} {source} rep {rep + 1} "
                            f"{name:8s} {run.tokens} tok in {run.wall_s:6.2f} s wall / {run.cpu_s:6.2f} s CPU "
                            f"= {run.tokens / run.wall_s:6.1f} tok/s" + (f", acc. length {acc:.2f}" if acc else ""))
                all_rows += summarize_cell(args, dtype, B, source, runs, backend)
        del engines
        common.drop_shared_weights()

    print_tables(args, all_rows)
    mism = [r for r in all_rows if r["dtype"] == "float32" and r["config"] != "plain"
            and r["equal_to_plain"]["equal"] != r["equal_to_plain"]["sequences"]]
    print(f"\nfloat32 exactness: {'all speculative runs equal plain greedy' if not mism else f'{len(mism)} MISMATCH cells'}"
          f"; total time {time.perf_counter() - t_start:.0f} s")
    if args.json_out:
        common.write_json(args.json_out, {"info": info, "results": all_rows})
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
