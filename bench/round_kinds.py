"""Plain (or a fixed setting) against one adaptive configuration in one process, with the CPU time of
every round by kind.

Fresh processes differ from each other by a few percent on these VMs (BENCHMARKS.md), more than the
gaps an adaptive engine has to close against plain. This bench removes that noise: both engines
share one target model (bench/common.share_target_weights), run the same prompts in alternating
order, and every round is timed and labelled by what it did:

- `plain`: a decode round that did not draft (plain engine; k = 0 or a skipped verify draft);
- `k<K>`: a draft-step round with K draft steps; `K<w>:G<G>`: a verify round that drafted w and ran
  G target rows (G = B: drafted, verified nothing: a probe);
- `prefill`: a round with a prompt chunk in it;
- a `probe ` prefix: a round the controller ran only to measure acceptance (plan.probe);
- an ` after draft` suffix on `plain`: a plain round right after a round that drafted (what the next
  round pays for a draft, e.g. the KV left by rejected tokens); an ` after plain` suffix on a drafting round:
  the first after rounds without a draft (its draft catches up on the positions it skipped);
- with `--by_batch`, an `@B<n>` suffix: the round's number of decoding requests (the staggered stream's
  batch grows and shrinks; `--source=staggered` serves the mixed stream with `--arrival_gap`).

The engines are built as bench/adaptive.py builds them (its configuration names, its quick
calibration unless --calibration_json; `mtp_step_alt` with --alt_step_policy). The last line prices every
round of both engines at the median time of its kind over both engines: the ratio then follows which rounds
each engine chose rather than when the machine was busy (stop 43: a policy A/B in one process, `--repeats=1`,
several processes; each engine still calibrates its own table).

    OMP_NUM_THREADS=1 taskset -c 0 python bench/round_kinds.py --config=dspark7_async --batch_size=4
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import adaptive, common  # noqa: E402
from bench.common import log, markdown_table  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="plain (or a fixed setting) vs one adaptive configuration in one process, "
                                            "per-round CPU time by kind", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", default="dspark7_async",
                   help="a bench/adaptive.py configuration name (e.g. mtp_step, dspark7_sync, dspark7_async, mtp_k1)")
    p.add_argument("--baseline", default="plain",
                   help="the configuration to compare with (plain, or a fixed one such as mtp_k1)")
    p.add_argument("--batch_size", type=int, default=1, help="requests decoding together")
    p.add_argument("--source", default="mixed",
                   help="held-out prompt stream: code, chat, prose, mixed, or staggered (mixed, request i arriving "
                        "i x --arrival_gap CPU seconds after the start, at most --batch_size running)")
    p.add_argument("--arrival_gap", type=float, default=2.0,
                   help="--source=staggered: seconds of process CPU time between arrivals (bench/adaptive.py's default)")
    p.add_argument("--by_batch", action="store_true",
                   help="label every round with its number of decoding requests (@B<n>)")
    p.add_argument("--num_prompts", type=int, default=4, help="prompts per run")
    p.add_argument("--max_tokens", type=int, default=256, help="output tokens per prompt (EOS ignored)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each engine, in alternating order")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="sampling temperature; > 0: request i is seeded with i (bench/common.serve), so outputs still compare")
    p.add_argument("--k_max", type=int, default=3, help="MTP draft steps at most (bench/adaptive.py's --k_max)")
    p.add_argument("--alt_step_policy", default="{}",
                   help="policy fields of bench/adaptive.py's mtp_step_alt configuration (JSON object)")
    p.add_argument("--calibration_json", default=None,
                   help="calibration fields for the adaptive engine (bench/adaptive.py's option); default its quick "
                        "calibration")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.batch_size < 1 or args.num_prompts < 1 or args.repeats < 1 or args.max_tokens < 1:
        raise SystemExit("--batch_size, --num_prompts, --repeats and --max_tokens must be >= 1")
    if not args.temperature >= 0:
        raise SystemExit(f"--temperature must be >= 0, got {args.temperature}")
    if not 0 < args.arrival_gap < float("inf"):
        raise SystemExit(f"--arrival_gap must be a finite number of seconds > 0, got {args.arrival_gap}")
    common.setup_threads(1)
    common.share_target_weights()
    print(f"# round kinds: {common.machine()}; {args.baseline} vs {args.config}, B={args.batch_size}", flush=True)
    # buckets below B (closed-batch costs) on bench/adaptive.py's ladder, which keeps the sparse grid connected
    buckets = ",".join(str(b) for b in sorted({1, args.batch_size} | {b for b in (4, 8, 16) if b < args.batch_size}))
    bench_argv = [f"--configs={args.baseline},{args.config}", f"--batch_sizes={buckets}", "--dtypes=float32",
                  f"--sources={args.source}", f"--num_prompts={args.num_prompts}", f"--max_tokens={args.max_tokens}",
                  "--ignore_eos", f"--alt_step_policy={args.alt_step_policy}", f"--k_max={args.k_max}"]
    bench_argv += [f"--calibration_json={args.calibration_json}"] if args.calibration_json else []
    bargs = adaptive.parse_args(bench_argv)
    workdir = Path(tempfile.mkdtemp(prefix="adaspec_round_kinds_"))
    files = adaptive.write_calibration_files(bargs, workdir)
    engines, _ = adaptive.build_engines(bargs, "float32", files, workdir)
    names = [adaptive.config_kind(c)["engine"] for c in (args.baseline, args.config)]
    if names[0] == names[1]:
        raise SystemExit(f"--config={args.config} and --baseline={args.baseline} are the same engine")
    engines = {n: engines[n] for n in names}
    prompts = common.prompt_sets(engines[names[0]].tokenizer, [args.source], args.num_prompts, bargs.prompt_tokens,
                                 bargs.chat_template)[args.source]
    kinds: dict = collections.defaultdict(list)
    produced: dict = collections.Counter()  # (engine, kind) -> tokens its rounds committed
    drafted: dict = {}  # engine name -> whether its last decode round drafted
    for name, llm in engines.items():
        rounds, run = llm.engine.rounds, llm.engine.rounds.run

        def timed(chunks, plan, run=run, name=name, llm=llm):  # bound now: the loop variables move on
            c = time.process_time()
            out = run(chunks, plan)
            decoding = sum(1 for ch in chunks if ch.is_decode)
            if decoding < len(chunks):
                kind = "prefill"
            elif plan.num_steps == 0:
                kind = "plain"
            elif plan.admission == "fixed" and llm.engine.control is not None and llm.engine.control.step is not None:
                kind = f"k{plan.num_steps}"
                if plan.stop_below > 0:  # the confidence stop: the rows it verified (at B = 1, the steps drafted too)
                    kind += f":v{max(out.verify_lens, default=0)}"
            else:
                kind = f"K{plan.num_steps}:G{decoding + sum(out.verify_lens)}"
            if kind == "plain" and drafted.get(name):
                kind = "plain after draft"
            elif plan.num_steps > 0 and drafted.get(name) is False and not plan.probe:
                kind += " after plain"  # the draft catches up on the positions committed without it
            if plan.probe:
                kind = "probe " + kind
            if args.by_batch and kind != "prefill":
                kind += f"@B{decoding}"
            if kind != "prefill":
                drafted[name] = plan.num_steps > 0
            kinds[name, kind].append(time.process_time() - c)
            produced[name, kind] += sum(len(t) for t in out.new_tokens)
            return out

        rounds.run = timed

    from adaspec.sampling_params import SamplingParams

    def params(i: int) -> SamplingParams:
        seed = i if args.temperature > 0 else None
        return SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, ignore_eos=True, seed=seed)

    def serve(llm):
        if args.source == "staggered":  # arrivals in CPU time, at most batch_size running (bench/common.serve)
            run = common.serve(llm, prompts, args.batch_size, args.max_tokens, ignore_eos=True,
                               temperature=args.temperature, arrival_gap_s=args.arrival_gap)
            return run.cpu_s, run.outputs
        e = llm.engine
        c = time.process_time()
        ids = [e.add_request(list(p.ids), params(i)) for i, p in enumerate(prompts)]
        done = {}
        while e.has_unfinished():
            for o in e.step():
                if o.finished:
                    done[o.request_id] = list(o.token_ids)
        outs = [done[i] for i in ids]
        return time.process_time() - c, outs

    times: dict = {n: [] for n in names}
    outputs: dict = {}
    for rep in range(args.repeats):
        for n in (names if rep % 2 == 0 else names[::-1]):
            t, outputs[n] = serve(engines[n])
            times[n].append(t)
            log(f"  rep {rep + 1} {n}: {t:.2f} s CPU")
    med = {n: common.median(v) for n, v in times.items()}
    base, cand = names
    print(f"\n{args.config} x {args.baseline} (median CPU s): {med[base] / med[cand]:.3f}; per repeat "
          + " ".join(f"{p / a:.3f}" for p, a in zip(times[base], times[cand]))
          + f"; outputs equal: {outputs[cand] == outputs[base]}\n")
    body = []
    for (n, kind), v in sorted(kinds.items()):
        body.append([n, kind, len(v), f"{1000 * common.median(v):.2f}", f"{1000 * sum(v) / len(v):.2f}",
                     f"{sum(v):.2f}", f"{produced[n, kind] / len(v):.2f}",
                     f"{produced[n, kind] / (1000 * common.median(v) * len(v)):.4f}"])
    print(markdown_table(["engine", "round kind", "rounds", "median ms", "mean ms", "total s", "tokens/round",
                          "tokens/ms at the median"], body, "llrrrrrr"))
    priced = priced_totals(kinds, names, args.repeats)
    print(f"\npriced at the median of both engines' rounds of each kind (round counts decide, timing noise mostly "
          f"does not): {args.config} x {args.baseline} {priced[base] / priced[cand]:.3f} "
          f"({base} {priced[base]:.2f} s, {args.config} {priced[cand]:.2f} s per run)")
    return 0


def priced_totals(kinds: dict, names, runs: int) -> dict:
    """Per engine, the CPU seconds of one run with every round priced at the median of the round kind's times
    over both engines (a kind only one engine ran: its own median)."""
    pooled: dict = collections.defaultdict(list)
    for (_, kind), v in kinds.items():
        pooled[kind] += v
    return {n: sum(len(v) * common.median(pooled[kind]) for (m, kind), v in kinds.items() if m == n) / runs
            for n in names}


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
