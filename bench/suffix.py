"""Suffix and MTP+Suffix drafts, fixed and under adaptive control, vs plain and MTP (issue 10, item 6; R-I3).

In one process (every engine shares one copy of the target weights, bench/common.py), on held-out
prompt streams (`copy`: the held-out copy-heavy set, adaspec/assets/copy_prompts_heldout.jsonl;
`code`, `chat`, `prose`, `mixed` as in bench/speculative.py), greedy, configurations:

- `plain`; fixed: `mtpK`, `suffixK`, `mtp+suffixK` (K draft tokens per round; Suffix verifies only
  what it proposed);
- adaptive draft step over k = 0..K: `suffix_stepK`, `mtp+suffix_stepK`;
- adaptive target verify, width W in {5, 7}: `suffix_syncW`, `suffix_asyncW` (schedule overlap),
  `mtp+suffix_syncW`, `mtp+suffix_asyncW`.

Adaptive engines calibrate at start-up with bench/adaptive.py's small calibration (request buckets =
the batch sizes, one context range prefill 256 / KV 1..--max_model_len; --calibration_json to
override). Before every run the adaptive controllers are
rebuilt and the drafters' feedback (Suffix score estimate, MTP window, global cache) is reset to its
prior, so no run starts from another run's feedback.

Reported per (source, B) cell: tokens/s (wall and process CPU), ratio to plain and to the best fixed
speculative setting of the cell, the decode-phase ratio to plain (each run less the prompts' prefill,
measured once per cell by plain decoding with max_tokens = 1: copy prompts are long, and their
prefill is the same work in every configuration), TPOT (median over requests), mean acceptance length (bonus included,
per round that verified >= 1 draft token), acceptance rate, tokens per request-round (all decode
rounds, so rounds without a proposal count), the drafter's host time as a share of the run, exactness
against plain greedy (float32: any difference prints MISMATCH). Medians over --repeats, order
alternating.

    taskset -c 0 python bench/suffix.py --batch_sizes=1,16 --sources=copy,code,chat --max_tokens=256 \\
        --configs=plain,mtp3,suffix5,mtp+suffix3,suffix_step5,mtp+suffix_step3,suffix_sync5,suffix_async5 \\
        --json_out=bench/results/suffix.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.adaptive_calibration import DEFAULT_CALIBRATION, sparse_target_rows  # noqa: E402
from bench.common import fmt, fmt_hist, fmt_ratio, log, markdown_table, median  # noqa: E402
from bench.speculative import parse_config as parse_fixed  # noqa: E402

ADAPTIVE = {"suffix": "Suffix", "mtp+suffix": "MTP+Suffix"}


def parse_config(name: str) -> dict:
    """{"algo", "width", "mode"}: mode fixed | step | sync | async."""
    for prefix, algo in sorted(ADAPTIVE.items(), key=lambda kv: -len(kv[0])):
        for mode in ("step", "sync", "async"):
            head = f"{prefix}_{mode}"
            if name.startswith(head) and name[len(head):].isdigit():
                w = int(name[len(head):])
                if mode != "step" and w not in (5, 7):
                    raise SystemExit(f"--configs: {name}: adaptive verify needs width 5 or 7")
                if not 1 <= w <= 16:
                    raise SystemExit(f"--configs: {name}: width outside 1..16")
                return {"algo": algo, "width": w, "mode": mode}
    algo, width = parse_fixed(name)
    return {"algo": algo, "width": width, "mode": "fixed"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Suffix / MTP+Suffix drafts, fixed and adaptive, vs plain and MTP",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configs", default="plain,mtp3,suffix5,mtp+suffix3,suffix_step5,mtp+suffix_step3,suffix_sync5,"
                                        "suffix_async5,mtp+suffix_sync5",
                   help="comma-separated configuration names (module docstring); plain is always added")
    p.add_argument("--batch_sizes", default="1,16", help="comma-separated: most requests running at once")
    p.add_argument("--sources", default="copy,code,chat",
                   help="comma-separated: copy (held-out copy-heavy set), copydev (its dev split: the only one to tune "
                        "on), code, chat, prose, mixed")
    p.add_argument("--num_prompts", type=int, default=4, help="prompts per stream (at least B)")
    p.add_argument("--max_tokens", type=int, default=256, help="new tokens per request at most (greedy)")
    p.add_argument("--ignore_eos", action="store_true", help="generate exactly --max_tokens tokens per request")
    p.add_argument("--repeats", type=int, default=1, help="measurements per configuration and cell; medians")
    p.add_argument("--prompt_tokens", type=int, default=192, help="non-copy prompts are cut to this many tokens")
    p.add_argument("--suffix_global_cache", type=int, default=0, help="--suffix_global_cache of the Suffix engines")
    p.add_argument("--mtp_draft", default=None, help="MTP draft directory (default: the shipped draft)")
    p.add_argument("--calibration_json", default=None, help="calibration fields for the adaptive engines "
                                                            "(default: bench/adaptive.py's small calibration)")
    p.add_argument("--max_model_len", type=int, default=1024, help="context limit per request")
    p.add_argument("--linear_backend", default="auto", help="--linear_backend of every engine")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--clock", default="cpu", choices=("cpu", "wall"), help="clock for ratios")
    p.add_argument("--json_out", default=None, help="write every measurement and the summary here")
    args = p.parse_args(argv)
    names = common.parse_list(args.configs, str, name="configs")
    for n in names:
        parse_config(n)
    args.configs = ["plain"] + [n for n in dict.fromkeys(names) if n != "plain"]
    args.batch_sizes = sorted(common.parse_list(args.batch_sizes, int, name="batch_sizes"))
    args.sources = common.parse_list(args.sources, str, ("copy", "copydev", "code", "chat", "prose", "mixed"),
                                     name="sources")
    return args


def calibration_files(args, workdir: Path) -> dict:
    if args.calibration_json:
        data = json.loads(Path(args.calibration_json).read_text())
    else:  # bench/adaptive.py's small calibration, its KV range widened to the whole context (copy prompts are long)
        data = dict(DEFAULT_CALIBRATION, contexts=[{"prefill_tokens": 256, "min_kv_length": 1,
                                                    "max_kv_length": args.max_model_len}])
    data.setdefault("request_buckets", list(args.batch_sizes))
    files = {}
    for w in (5, 7):
        d = dict(data)
        if not args.calibration_json:
            d["target_graph_rows"] = sparse_target_rows(d["request_buckets"], w)
        files[w] = workdir / f"verify_{w}.json"
        files[w].write_text(json.dumps(d))
    step = {k: v for k, v in data.items() if k not in ("draft_width", "target_graph_rows", "model")}
    files["step"] = workdir / "step.json"
    files["step"].write_text(json.dumps({"version": 1, "calibration": step}))
    return files


def build_engines(args, files: dict) -> tuple[dict, dict]:
    engines, startup = {}, {}
    for name in args.configs:
        c = parse_config(name)
        flags = dict(linear_backend=args.linear_backend)
        if c["algo"] in ADAPTIVE.values():
            flags["suffix_global_cache"] = args.suffix_global_cache
        if c["mode"] != "fixed":
            flags["graph_decode_batch_sizes"] = tuple(args.batch_sizes)
        if c["mode"] == "step":
            flags.update(enable_adaptive_draft_step=True, adaptive_draft_step_config=str(files["step"]))
        elif c["mode"] in ("sync", "async"):
            flags.update(enable_adaptive_target_verify=True, adaptive_target_verify_calibration=str(files[c["width"]]),
                         enable_schedule_overlap=c["mode"] == "async")
        draft = args.mtp_draft if c["algo"] in ("MTP", "MTP+Suffix") else None
        t0, c0 = time.perf_counter(), time.process_time()
        engines[name] = common.build_llm("float32", c["algo"], c["width"], draft, max_seqs=max(args.batch_sizes),
                                         max_model_len=args.max_model_len, threads=args.threads, **flags)
        startup[name] = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
        log(f"[bench] {name}: ready in {startup[name]['wall_s']:.1f} s ({startup[name]['cpu_s']:.1f} s CPU; linear "
            f"backend {engines[name].engine.linear_backend})")
    return engines, startup


def measure(llm, name: str, stream, B: int, args):
    eng = llm.engine
    if eng.control is not None:
        eng.control.reset()  # cold controllers on the same table
        hist = eng.control.step.k_histogram if eng.control.step is not None else eng.control.verify.g_histogram
        before = Counter(hist)
    if hasattr(eng.drafter, "reset_feedback"):
        eng.drafter.reset_feedback()
    run = common.serve(llm, stream, B, args.max_tokens, args.ignore_eos)
    run.config = name
    if eng.control is not None:
        hist = eng.control.step.k_histogram if eng.control.step is not None else eng.control.verify.g_histogram
        run.extra["chosen"] = {str(k): v for k, v in sorted((Counter(hist) - before).items())}
    if hasattr(eng.drafter, "stats"):
        st = eng.drafter.stats()
        run.extra["drafter"] = st
        run.extra["drafter_share"] = st["draft_host_seconds"] / run.wall_s if run.wall_s else None
    return run


def summarize(args, B, source, runs: dict, prefill_s: dict) -> list[dict]:
    key = "cpu_s" if args.clock == "cpu" else "wall_s"
    ref = runs["plain"][0].outputs
    rows = []
    for name, rs in runs.items():
        st, cmp = rs[0].stats, common.compare_tokens(rs[0].outputs, ref)
        rounds = st.get("decode_rounds") or 0
        req_rounds = (st.get("mean_batch") or 0) * rounds
        rows.append({
            "source": source, "batch_size": B, "config": name, "mode": parse_config(name)["mode"],
            "tokens": rs[0].tokens, "wall_tok_s": median([r.tokens / r.wall_s for r in rs]),
            "cpu_tok_s": median([r.tokens / r.cpu_s for r in rs]),
            "tok_s": median([r.tokens / getattr(r, key) for r in rs]),
            # decode phase only: the run less the prompts' prefill (measured alone, the same in every config)
            "decode_tok_s": median([(r.tokens - len(ref)) / max(1e-9, getattr(r, key) - prefill_s[key]) for r in rs]),
            "prefill_s": prefill_s,
            "tpot_ms": median([median(r.tpot_ms) for r in rs]),
            "acceptance_length": st["mean_acceptance_length"], "acceptance_rate": st["acceptance_rate"],
            "tokens_per_request_round": (rs[0].tokens - len(ref)) / req_rounds if req_rounds else None,
            "drafter_share": median([r.extra.get("drafter_share") for r in rs]),
            "drafter": rs[0].extra.get("drafter"), "chosen": rs[0].extra.get("chosen"),
            "equal_to_plain": cmp, "raw": [{"wall_s": r.wall_s, "cpu_s": r.cpu_s, "tokens": r.tokens} for r in rs],
        })
        if name != "plain" and cmp["equal"] != cmp["sequences"]:
            print(f"MISMATCH: B={B} {source} {name}: {cmp['sequences'] - cmp['equal']}/{cmp['sequences']} sequences "
                  f"differ from plain greedy (first at {cmp['first_difference']})", flush=True)
    plain = next(r for r in rows if r["config"] == "plain")["tok_s"]
    fixed = [r for r in rows if r["mode"] == "fixed" and r["config"] != "plain"]
    best = max(fixed, key=lambda r: r["tok_s"]) if fixed else None
    plain_decode = next(r for r in rows if r["config"] == "plain")["decode_tok_s"]
    for r in rows:
        r["ratio_to_plain"] = r["tok_s"] / plain if plain else None
        r["decode_ratio_to_plain"] = r["decode_tok_s"] / plain_decode if plain_decode else None
        r["best_fixed"] = best["config"] if best else None
        r["ratio_to_best_fixed"] = r["tok_s"] / best["tok_s"] if best else None
    return rows


def print_tables(args, rows: list[dict]) -> None:
    clock = "CPU" if args.clock == "cpu" else "wall"
    for source in args.sources:
        for B in args.batch_sizes:
            sel = [r for r in rows if (r["source"], r["batch_size"]) == (source, B)]
            if not sel:
                continue
            print(f"\n### {source}, B={B} (max_tokens {args.max_tokens}; ratios on the {clock} clock; best fixed = "
                  f"{sel[0]['best_fixed']})\n")
            head = ["config", "tok/s wall", "tok/s CPU", "× plain", "× plain (decode)", "× best fixed", "TPOT ms",
                    "acc. length",
                    "acc. rate", "tok/req-round", "drafter share", "chosen", "= plain"]
            body = [[r["config"], fmt(r["wall_tok_s"]), fmt(r["cpu_tok_s"]), fmt_ratio(r["ratio_to_plain"]),
                     fmt_ratio(r["decode_ratio_to_plain"]), fmt_ratio(r["ratio_to_best_fixed"]), fmt(r["tpot_ms"]), fmt(r["acceptance_length"], 2),
                     fmt(r["acceptance_rate"], 2), fmt(r["tokens_per_request_round"], 2),
                     "–" if r["drafter_share"] is None else f"{100 * r['drafter_share']:.2f}%",
                     fmt_hist(r["chosen"]), f"{r['equal_to_plain']['equal']}/{r['equal_to_plain']['sequences']}"]
                    for r in sel]
            print(markdown_table(head, body, "l" + "r" * 12), flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(args.threads)
    common.share_target_weights()
    info = common.run_info(args)
    print(f"# suffix bench: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    print(f"# {info['command']}", flush=True)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        engines, startup = build_engines(args, calibration_files(args, Path(tmp)))
    sets = common.warmed_prompt_sets(engines, args)
    rows = []
    for source in args.sources:
        for B in args.batch_sizes:
            stream = sets[source][:max(args.num_prompts, B)]
            runs = {n: [] for n in args.configs}
            # the prompts' prefill (plus each first token), identical work in every configuration
            prefill = common.serve(engines["plain"], stream, B, 1)
            prefill_s = {"cpu_s": prefill.cpu_s, "wall_s": prefill.wall_s}
            log(f"  B={B} {source}: prefill + first tokens {prefill.cpu_s:.2f} s CPU")
            for rep in range(args.repeats):
                for name in common.alternating(args.configs, rep):
                    run = measure(engines[name], name, stream, B, args)
                    runs[name].append(run)
                    acc = run.stats["mean_acceptance_length"]
                    log(f"  [{time.perf_counter() - t_start:6.0f} s] B={B} {source} rep {rep + 1} {name:18s} "
                        f"{run.tokens} tok {run.wall_s:6.2f} s wall / {run.cpu_s:6.2f} s CPU = "
                        f"{run.tokens / run.cpu_s:6.1f} tok/s CPU" + (f", acc. length {acc:.2f}" if acc else ""))
            rows += summarize(args, B, source, runs, prefill_s)
            print_tables(args, [r for r in rows if (r["source"], r["batch_size"]) == (source, B)])
    mism = [r for r in rows if r["config"] != "plain" and r["equal_to_plain"]["equal"] != r["equal_to_plain"]["sequences"]]
    print(f"\nfloat32 exactness: {'all runs equal plain greedy' if not mism else f'{len(mism)} MISMATCH cells'}; "
          f"total {time.perf_counter() - t_start:.0f} s", flush=True)
    if args.json_out:
        common.write_json(args.json_out, {"info": info, "startup": startup, "results": rows})
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
