"""A fixed MTP k = 1 on the staggered stream (B = 4): acceptance per request, per batch size, and per 25 rounds
(stop 42: what the draft step's pooled window could not see). An argument names another source (stop 43: `mixed`,
the paired cell's four prompts, bench/results/s43/peracc_mixed.md).

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s42/peracc.py [staggered|mixed|code|chat|prose]
"""
import sys, tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from bench import adaptive, common
common.setup_threads(1); common.share_target_weights()
src = sys.argv[1] if len(sys.argv) > 1 else "staggered"
bargs = adaptive.parse_args(["--configs=mtp_k1", "--batch_sizes=4", "--dtypes=float32", f"--sources={src}", "--num_prompts=4",
                             "--max_tokens=256", "--ignore_eos"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
llm = engines["mtp_k1"]; e = llm.engine
prompts = common.prompt_sets(llm.tokenizer, [src], 4, bargs.prompt_tokens, bargs.chat_template)[src]
from adaspec.sampling_params import SamplingParams
log = []  # per round: (n decoding, [(rid, L, m)])
orig = e._collect
def collect(batch, plan, timed):
    res = timed[0]
    dec = [c.request.request_id for c in batch.chunks if c.is_decode]
    log.append(list(zip(dec, res.verify_lens, res.num_accepted)))
    return orig(batch, plan, timed)
e._collect = collect
run = common.serve(llm, prompts, 4, 256, ignore_eos=True, arrival_gap_s=2.0 if src == "staggered" else 0.0)
import collections
byB = collections.defaultdict(lambda: [0, 0]); byR = collections.defaultdict(lambda: [0, 0])
for r in log:
    for rid, L, m in r:
        byB[len(r)][0] += L; byB[len(r)][1] += m; byR[rid][0] += L; byR[rid][1] += m
print("by B", {b: (v[0], round(v[1]/max(1,v[0]),3)) for b, v in sorted(byB.items())})
print("by req", {b: (v[0], round(v[1]/max(1,v[0]),3)) for b, v in byR.items()})
# timeline: per 20 rounds, B and acceptance per request
for i in range(0, len(log), 25):
    ch = log[i:i+25]
    acc = collections.defaultdict(lambda: [0,0])
    for r in ch:
        for rid, L, m in r: acc[rid][0]+=L; acc[rid][1]+=m
    print(i, "B", sorted({len(r) for r in ch}), {k: round(v[1]/max(1,v[0]),2) for k, v in acc.items()})
