"""The draft step's confidence stop, simulated: how much any stop rule could earn at batch 1, greedy (issue 13).

Three parts, in one process (fp32, one thread):

1. **Records.** The float32 target continues --num_prompts held-out prompts of each source greedily
   (--max_tokens, EOS ignored) through the trainer's distiller (training/distill.py); the shipped MTP draft
   is then teacher-forced over every position of each continuation through its own allocate()/draft()
   (training/evaluate.simulate): per anchor, the k_max tokens it proposes, its probability of each, and m,
   how many of them the greedy target accepts. Greedy acceptance depends only on the text, so these are
   exactly the rounds a decode meets (on stop 51's mixed stream the walk's tokens per round equal the
   engine's to three decimals: 1.565 / 1.875 / 2.04 for fixed k = 1 / 2 / 3, 1.956 for ceiling 5 + the stop).
2. **Costs.** Median wall ms of one round at B = 1 for plain and fixed k = 1..k_max, every engine serving
   the mixed stream at once, one round each in turn (bench/adaptive_interleaved.py's design).
3. **The walk.** Each continuation is decoded as the engine decodes it: a round at a position drafts d
   steps (the rule's choice), accepts min(m, d), moves min(m, d) + 1 on and costs the fixed-d round's
   median. Rules: fixed k; the stop (`confidence_stop`: drafting ends after the first step whose path
   probability falls below the threshold, that step verified) under each ceiling; and one threshold per
   depth, searched on a grid. Reported against the best fixed k of the same walk.

What it leaves out: the controller (its choice of ceiling, plain stretches, exploration), sampling
(temperature > 0 accepts differently), batches of more than one request, and whatever a stopped round costs
beyond a fixed round of the same depth (BENCHMARKS.md stop 51: +0.1 / +0.4 / +1.0 ms at depths 1 / 2 / 3).
So its figures are an upper bound on what the stop itself can earn, not a forecast of the engine.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/stop_rules.py --json_out=bench/results/s51/stop_rules.json
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import log, markdown_table  # noqa: E402

SOURCES = ("code", "chat", "prose")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--num_prompts", type=int, default=6, help="held-out prompts per source (code, chat, prose)")
    p.add_argument("--max_tokens", type=int, default=256, help="greedy tokens each prompt is continued by")
    p.add_argument("--k_max", type=int, default=6, help="draft steps recorded per anchor, and the largest fixed k timed")
    p.add_argument("--thresholds", default="0.3,0.4,0.5,0.6,0.7,0.8", help="comma-separated confidence_stop values")
    p.add_argument("--depth_grid", default="0.4,0.5,0.6,0.7,0.8",
                   help="comma-separated thresholds searched for the first three depths separately ('' skips the search)")
    p.add_argument("--mixed", type=int, default=4,
                   help="also report the first N prompts of bench/adaptive.py's mixed stream (code, chat, prose, code, ...); 0: no")
    p.add_argument("--cost_tokens", type=int, default=160, help="tokens per request of the round-cost measurement")
    p.add_argument("--records", default=None, help="read records (and costs) from this JSON (an earlier --json_out) "
                                                   "instead of measuring them")
    p.add_argument("--json_out", default=None, help="write records, costs and results to this JSON file")
    args = p.parse_args(argv)
    if args.num_prompts < 1 or args.max_tokens < 2 or not 1 <= args.k_max <= 8:
        p.error("--num_prompts >= 1, --max_tokens >= 2 and --k_max in 1..8")
    args.thresholds = common.parse_list(args.thresholds, float, name="thresholds")
    args.depth_grid = common.parse_list(args.depth_grid, float, name="depth_grid") if args.depth_grid else []
    if any(not 0 < t < 1 for t in args.thresholds + args.depth_grid):
        p.error("--thresholds and --depth_grid take values in (0, 1)")
    if args.records and not Path(args.records).is_file():
        p.error(f"--records: no file {args.records}")
    return args


def measure_records(args) -> tuple[list[dict], list[str]]:
    """[{seq, src, m, scores}] per anchor, and each sequence's source (index = seq)."""
    from adaspec.training.distill import DataRecipe, Distiller, Item
    from adaspec.training.evaluate import simulate

    llm = common.build_llm("float32", "MTP", args.k_max, max_model_len=1024)
    model, drafter = llm.engine.model, llm.engine.drafter
    items = [Item(src, p.id, "valid", list(p.ids), True)
             for src in SOURCES for p in common.load_prompts(llm.tokenizer, src, args.num_prompts)]
    recipe = DataRecipe(fingerprint="bench", num_prompts=len(items), gen_tokens=args.max_tokens, prompt_tokens=192,
                        raw_tokens=0, teacher_layers=(model.config.num_layers - 1,))
    seqs = [None] * len(items)
    log(f"[bench] continuing {len(items)} prompts by {args.max_tokens} greedy tokens")
    Distiller(model, recipe, eos_ids=set(), max_batch=len(items)).run(items, lambda i, s: seqs.__setitem__(i, s))
    records = simulate(drafter, seqs, list(recipe.teacher_layers), args.k_max)
    # scores to 4 decimals: the file stays small, and no threshold of interest sits that close to a path probability
    return ([{"seq": i, "src": s, "m": m, "scores": [round(x, 4) for x in sc]} for i, s, m, sc in records],
            [it.source for it in items])


def measure_costs(args) -> dict[int, float]:
    """{k: median round ms at B = 1} for plain (k = 0) and fixed k = 1..k_max, rounds interleaved."""
    from bench.adaptive_interleaved import _Stream

    common.share_target_weights()
    llms = {0: common.build_llm("float32", max_model_len=1024)}
    llms.update({k: common.build_llm("float32", "MTP", k, max_model_len=1024) for k in range(1, args.k_max + 1)})
    prompts = common.prompt_sets(llms[0].tokenizer, ["mixed"], 6, 192, "auto")["mixed"]
    params = functools.partial(common.request_params, max_tokens=args.cost_tokens, ignore_eos=True, temperature=0.0)
    times: dict[int, list[float]] = {k: [] for k in llms}
    for rep in range(2):  # the engines' order within a turn alternates
        live = [(k, _Stream(llm, prompts, 1, params)) for k, llm in llms.items()]
        while live:
            for k, s in (live if rep % 2 == 0 else live[::-1]):
                before = s.wall
                s.step()
                times[k].append(1000.0 * (s.wall - before))
            live = [(k, s) for k, s in live if s.active]
    common.drop_shared_weights()
    return {k: statistics.median(v) for k, v in times.items()}


def stop_rule(thresholds, ceiling: int):
    """Draft steps of a round: the first step whose path probability falls below its depth's threshold (the last
    threshold for deeper steps), that step included; `ceiling` when none does."""
    def steps(scores) -> int:
        path = 1.0
        for j in range(ceiling):
            path *= min(max(scores[j], 0.0), 1.0)
            if path < thresholds[min(j, len(thresholds) - 1)]:
                return j + 1
        return ceiling
    return steps


def walk(anchors: dict[int, list[dict]], costs: dict[int, float], rule) -> tuple[float, float, float]:
    """(tokens per ms, tokens per round, ms per round) of a greedy decode of every sequence under `rule`."""
    tokens = rounds = ms = 0.0
    for an in anchors.values():
        n = 0
        while n < len(an):
            d = rule(an[n]["scores"])
            a = min(an[n]["m"], d)
            tokens, rounds, ms, n = tokens + a + 1, rounds + 1, ms + costs[d], n + a + 1
    return tokens / ms, tokens / rounds, ms / rounds


def evaluate(anchors, costs, args) -> list[dict]:
    """Every rule's row: name, x plain, x best fixed, tokens and ms per round."""
    K = max(costs)
    rules = {f"fixed k = {k}": (lambda s, k=k: k) for k in range(0, K + 1)}
    for ceiling in range(2, K + 1):
        for t in args.thresholds:
            rules[f"stop {t:g}, ceiling {ceiling}"] = stop_rule([t], ceiling)
    for grid in itertools.product(args.depth_grid, repeat=3):
        if len(set(grid)) > 1:
            rules[f"stop {'/'.join(f'{t:g}' for t in grid)}, ceiling {K}"] = stop_rule(list(grid), K)
    results = {name: walk(anchors, costs, rule) for name, rule in rules.items()}
    plain = results["fixed k = 0"][0]
    best = max(r[0] for name, r in results.items() if name.startswith("fixed") and name != "fixed k = 0")
    return sorted(({"rule": n, "x_plain": r[0] / plain, "x_best_fixed": r[0] / best, "tokens_per_round": r[1],
                    "ms_per_round": r[2]} for n, r in results.items()), key=lambda row: -row["x_plain"])


def table(rows: list[dict], top: int) -> str:
    fixed = [r for r in rows if r["rule"].startswith("fixed")]
    shown = rows[:top] + [r for r in fixed if r not in rows[:top]]
    return markdown_table(("rule", "x plain", "x best fixed k", "tokens / round", "ms / round"),
                          [(r["rule"], f"{r['x_plain']:.3f}", f"{r['x_best_fixed']:.3f}", f"{r['tokens_per_round']:.3f}",
                            f"{r['ms_per_round']:.2f}") for r in shown])


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.records:
        saved = json.loads(Path(args.records).read_text())
        records, sources, costs = saved["records"], saved["sources"], {int(k): v for k, v in saved["costs_ms"].items()}
        args.k_max = min(args.k_max, max(costs))
    else:
        common.setup_threads(1)
        records, sources = measure_records(args)
        costs = measure_costs(args)
    costs = {k: v for k, v in costs.items() if k <= args.k_max}
    anchors: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        anchors[r["seq"]].append(r)
    print(f"round ms at B = 1 (median): {', '.join(f'k = {k}: {v:.2f}' for k, v in sorted(costs.items()))}")
    streams = {"all sources": list(anchors)} | {s: [i for i in anchors if sources[i] == s] for s in SOURCES}
    if args.mixed:
        by_src = {s: [i for i in anchors if sources[i] == s] for s in SOURCES}
        order = [i for group in itertools.zip_longest(*by_src.values()) for i in group if i is not None]
        streams[f"bench mixed stream ({args.mixed} prompts)"] = order[:args.mixed]
    out = {}
    for name, seqs in streams.items():
        rows = evaluate({i: anchors[i] for i in seqs}, costs, args)
        out[name] = rows[:20] + [r for r in rows[20:] if r["rule"].startswith("fixed")]  # the file keeps the best 20
        print(f"\n### {name}: {len(seqs)} continuations\n\n{table(rows, 8)}")
    if args.json_out:
        common.write_json(args.json_out, {"info": common.run_info(args), "costs_ms": costs, "sources": sources,
                                          "records": records, "results": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
