"""What the adaptive draft step's exploration costs where plain decoding is right (issue 13).

One adaptive-draft-step MTP engine (calibrated as bench/step_cost_check.py does, one request bucket),
then whole runs of the same held-out mixed prompts (`--batch_size` at once, `--max_tokens` each,
greedy), alternating between two controllers on that one engine:
- `k0`: a controller that can only choose k = 0 and never probes (bench/step_cost_check.force_k):
  every round is a plain round of this engine;
- `adaptive`: the engine's own controller, rebuilt cold from its table (`control.reset()`).

The same engine object serves both, so the difference is the exploration alone (probes, optimistic
stays at k >= 1, the deferred draft refresh a probe pays) plus whatever the controller's choices win
or lose, without the placement bias between engines built one after another in one process.
Process CPU time of each whole run; medians of `--repeats`, and each adjacent pair's ratio.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/explore_cost.py --batch_size=16 --repeats=4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.step_cost_check import calibrated_costs, force_k  # noqa: E402
from bench.step_cost_check import parse_args as cost_check_args  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--batch_size", type=int, default=16, help="requests decoding together (= the calibrated bucket)")
    p.add_argument("--k_max", type=int, default=3, help="largest draft step count of the adaptive engine")
    p.add_argument("--max_tokens", type=int, default=256, help="tokens per request (end of sequence ignored)")
    p.add_argument("--repeats", type=int, default=4, help="runs per controller, alternating which goes first")
    p.add_argument("--json_out", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    if min(args.batch_size, args.k_max, args.max_tokens, args.repeats) < 1:
        p.error("--batch_size, --k_max, --max_tokens and --repeats must be >= 1")
    return args


def whole_run(llm, prompts, max_tokens: int) -> float:
    from adaspec.sampling_params import SamplingParams

    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    for p in prompts:
        engine.add_request(list(p.ids), params)
    c0 = time.process_time()
    while engine.has_unfinished():
        engine.step()
    return time.process_time() - c0


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(1)
    info = common.run_info(args)
    print(f"# exploration cost of the draft step: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    # step_cost_check's own calibration defaults, not a copy of them
    cal_args = cost_check_args([f"--batch_size={args.batch_size}", f"--k_max={args.k_max}",
                                f"--max_tokens={args.max_tokens}"])
    with tempfile.TemporaryDirectory() as tmp:
        llm, table, _ = calibrated_costs(cal_args, Path(tmp))
    common.log(f"[bench] table at bucket {args.batch_size}: " + ", ".join(f"k={k} {c:.1f} ms" for k, c in enumerate(table)))
    prompts = common.prompt_sets(llm.tokenizer, ["mixed"], args.batch_size, cal_args.prompt_tokens, "auto")["mixed"]
    common.serve(llm, prompts[:2], 2, 4, ignore_eos=True)  # first-call costs out of the way
    runs: dict[str, list[float]] = {"k0": [], "adaptive": []}
    shares = []
    for rep in range(args.repeats):
        for mode in (("k0", "adaptive") if rep % 2 == 0 else ("adaptive", "k0")):
            if mode == "k0":
                force_k(llm, 0)
            else:
                llm.engine.control.reset()
            runs[mode].append(whole_run(llm, prompts, args.max_tokens))
            step = llm.engine.control.step
            if mode == "adaptive":
                shares.append({"k": dict(sorted(step.k_histogram.items())), "probes": step.probe_rounds})
            common.log(f"[bench] rep {rep + 1} {mode:8s} {runs[mode][-1]:6.2f} s CPU, k {dict(sorted(step.k_histogram.items()))}, "
                       f"probes {step.probe_rounds}")
    pairs = [a / k for k, a in zip(runs["k0"], runs["adaptive"])]
    med = {m: statistics.median(v) for m, v in runs.items()}
    print(f"median CPU s: k0 {med['k0']:.2f}, adaptive {med['adaptive']:.2f}; adaptive / k0 time "
          f"{med['adaptive'] / med['k0']:.3f} (per repeat {', '.join(f'{r:.3f}' for r in pairs)})")
    if args.json_out:
        common.write_json(args.json_out, {"info": info, "table_ms": table, "cpu_s": runs, "adaptive": shares,
                                          "pair_ratios": pairs})
    return 0


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
