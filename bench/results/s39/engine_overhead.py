"""Stop 39: what an adaptive draft-step engine's plain rounds cost against the plain engine, next to what two
identical plain engines differ by, in one process (shared target weights, bench/common.share_target_weights).

Engines built in the order of argv[4] ("p" plain, "m" the mtp_step engine of bench/adaptive.py, its controller
forced to k = 0 by bench/step_cost_check.force_k), then argv[3] repeats of the same B held-out mixed prompts x 128
tokens, the engine order reversed every repeat; process CPU time per run, ratios to the first engine.
Run: OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s39/engine_overhead.py 0 4 6 pmp   # T, B, repeats, order
"""
import collections
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import adaptive, common  # noqa: E402
from bench.step_cost_check import force_k  # noqa: E402


def main():
    common.setup_threads(1)
    common.share_target_weights()
    T, B, reps, order = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    base = [f"--batch_sizes=1,{B}", "--dtypes=float32", "--sources=mixed", f"--num_prompts={B}", "--k_max=3"]
    wd = Path(tempfile.mkdtemp())
    files = adaptive.write_calibration_files(adaptive.parse_args(["--configs=plain,mtp_step"] + base), wd)
    built = {}
    for ch in order:
        if ch == "p":
            e, _ = adaptive.build_engines(adaptive.parse_args(["--configs=plain"] + base), "float32", files, wd)
            built[f"plain{sum(k.startswith('plain') for k in built)}"] = list(e.values())[0]
        else:
            e, _ = adaptive.build_engines(adaptive.parse_args(["--configs=mtp_step"] + base), "float32", files, wd)
            llm = [x for x in e.values() if x.engine.control is not None][0]
            force_k(llm, 0)
            built["mtp_k0"] = llm
    names = list(built)
    prompts = common.prompt_sets(built[names[0]].tokenizer, ["mixed"], B, 192, "auto")["mixed"]
    times = collections.defaultdict(list)
    for rep in range(reps):
        for n in (names if rep % 2 == 0 else names[::-1]):
            times[n].append(common.serve(built[n], prompts, B, 128, True, temperature=T).cpu_s)
    print("build order", names, {n: round(statistics.median(v), 3) for n, v in times.items()})
    for n in names[1:]:
        rs = [a / b for a, b in zip(times[names[0]], times[n])]
        print(f"{names[0]}/{n}: median {statistics.median(rs):.3f} per repeat {' '.join(f'{r:.3f}' for r in rs)}")


if __name__ == "__main__":
    main()
