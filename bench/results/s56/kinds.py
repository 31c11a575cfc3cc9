"""Where the draft step's time goes against plain in a closed batch (B requests, B prompts of SOURCE, 256 tokens):
per round kind (plain, probe, cost check, the first drafting round after plain = catch-up, steady drafting) the count
and total ms, against the plain engine's median round at the same step. usage: kinds.py <checkout> B SOURCE REPS"""
import sys, tempfile, statistics, collections
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
B, SRC, reps = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=plain,mtp_step", f"--batch_sizes={B}", "--dtypes=float32", f"--sources={SRC}",
                             f"--num_prompts={B}", "--max_tokens=256", "--ignore_eos", "--temperature=0", "--k_max=5",
                             "--interleave"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
ctl = engines["mtp_step"].engine.control
rounds = {"mtp_step": [], "plain": []}
def observer(name):
    def obs(ev):
        if not ev.decoding or len(ev.batch.chunks) != len(ev.decoding):
            return  # prefill rounds aside
        rounds[name].append((len(ev.decoding), ev.plan.num_steps, ev.plan.probe, ev.plan.cost_check, 1000 * (ev.finished - ev.started)))
    return obs
for name in rounds:
    engines[name].engine.round_observers.append(observer(name))
for rep in range(reps):
    ctl.reset()
    for v in rounds.values():
        v.clear()
    runs = il.serve_interleaved(engines, sets[SRC][:B], B, 256, True, 0.0)
    r = {n: x.tokens / x.cpu_s for n, x in runs.items()}
    plain_ms = collections.defaultdict(list)
    for b, k, p, c, ms in rounds["plain"]:
        plain_ms[b].append(ms)
    med = {b: statistics.median(v) for b, v in plain_ms.items()}
    kinds = collections.defaultdict(lambda: [0, 0.0, 0.0])
    prev = None
    for b, k, p, c, ms in rounds["mtp_step"]:
        kind = "plain" if k == 0 else ("probe" if p else ("check" if c else ("catch-up" if prev == 0 else "drafting")))
        x = kinds[kind]; x[0] += 1; x[1] += ms; x[2] += ms - med.get(b, ms)
        prev = k
    tot_plain = sum(ms for *_, ms in rounds["plain"])
    print(f"rep {rep} step/plain {r['mtp_step'] / r['plain']:.3f} {ctl.summary()}")
    print(f"   plain engine: {len(rounds['plain'])} rounds, {tot_plain:.0f} ms; step engine {sum(ms for *_, ms in rounds['mtp_step']):.0f} ms")
    for kind, (n, ms, extra) in kinds.items():
        print(f"   {kind:9s} {n:4d} rounds {ms:8.1f} ms, over plain's median round {extra:+8.1f} ms ({100 * extra / tot_plain:+.2f}% of plain's time)")
