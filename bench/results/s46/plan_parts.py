"""Stop 46: per-round wall time of the draft step's parts against a fixed configuration, one process, alternating
order, with the draft step held at one k (every other k priced 3x its calibrated cost: only rare probes differ);
argv: the checkout to import, stream, B, repeats, the fixed configuration (plain, mtp_k1, ...), the k to hold,
temperature (default 0). What the two engines do differently per round is then the draft step's own overhead.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s46/plan_parts.py . mixed 4 4 plain 0
    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s46/plan_parts.py . code 1 4 mtp_k1 1 0.8
"""
import collections, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common
from adaspec.sampling_params import SamplingParams
src, B, reps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
base, hold = (sys.argv[5], int(sys.argv[6])) if len(sys.argv) > 6 else ("plain", 0)
temp = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0  # argv[8] (any): also time the round runner's parts
common.setup_threads(1); common.share_target_weights()
bargs = adaptive.parse_args([f"--configs={base},mtp_step", f"--batch_sizes={B}", "--dtypes=float32", f"--sources={src}",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
ctl = engines["mtp_step"].engine.control
sc = ctl.step.costs; cost = sc.cost_ms
sc.cost_ms = lambda b, k, _c=cost: (None if _c(b, k) is None else _c(b, k) * (1 if k == hold else 3))
T = collections.defaultdict(float); N = collections.Counter(); cur = [None]
def wrap(obj, attr, label):
    f = getattr(obj, attr)
    def g(*a, **k):
        c = time.perf_counter(); r = f(*a, **k); T[cur[0], label] += time.perf_counter() - c; N[cur[0], label] += 1; return r
    setattr(obj, attr, g)
for name, llm in engines.items():
    e = llm.engine
    wrap(e, "step", "step"); wrap(e.rounds.runner, "forward", "forward"); wrap(e.rounds, "_add_entries", "_add_entries")
    wrap(e, "plan", "engine.plan"); wrap(e, "_collect", "_collect"); wrap(e, "_schedule", "_schedule"); wrap(e, "_outputs", "_outputs")
    wrap(e.rounds, "run", "rounds.run")
    if e.control is not None:
        s = e.control.step
        wrap(e.control, "plan", "control.plan"); wrap(e.control, "_closed_batch", "control._closed_batch")
        wrap(s, "plan", "step.plan"); wrap(s, "_rescore", "step._rescore"); wrap(s.window, "observe", "window.observe")
        wrap(e.control, "observe", "control.observe")
        for a in ("_best", "_leave_zero", "_explored", "_closed_by_depth", "_loses_even_optimistically"):
            wrap(s, a, "step." + a)
        for a in ("prefix_acceptance", "request_prefix_acceptance", "aged_prefix_acceptance"):
            wrap(s.window, a, "window." + a)
        wrap(s.feedback, "release", "feedback.release"); wrap(s.costs, "for_batch", "costs.for_batch")
    if len(sys.argv) > 8:  # the round runner's parts too
        wrap(e.rounds, "_draft", "rounds._draft"); wrap(e.rounds.runner, "prepare", "runner.prepare")
        if e.rounds.drafter is not None:
            wrap(e.rounds.drafter, "draft", "drafter.draft")
prompts = common.prompt_sets(engines[base].tokenizer, [src], max(4, B), bargs.prompt_tokens, bargs.chat_template)[src]
rounds = collections.Counter(); wall = collections.defaultdict(list)
for rep in range(reps):
    for name in ([base, "mtp_step"] if rep % 2 == 0 else ["mtp_step", base]):
        cur[0] = name; e = engines[name].engine; t = time.perf_counter()
        [e.add_request(list(p.ids), SamplingParams(temperature=temp, seed=i, max_tokens=256, ignore_eos=True))
         for i, p in enumerate(prompts[:B])]
        while e.has_unfinished(): e.step(); rounds[name] += 1
        wall[name].append(time.perf_counter() - t)
for k in sorted(T, key=str): print(f"{k[0]:9s} {k[1]:24s} {N[k]:6d} calls {1000 * T[k] / rounds[k[0]]:8.4f} ms per round")
print(dict(rounds), {k: [round(x, 2) for x in v] for k, v in wall.items()})
print(ctl.summary())
