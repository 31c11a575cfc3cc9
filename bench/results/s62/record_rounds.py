"""Stop 62: record, for DSpark w = 7 at B = 1, every round's path probabilities P (the confidence head's, unscaled)
and the drafts the greedy target accepts at full width (m), plus the start-up table's round costs, for offline
admission studies (offline_admission.py). The run verifies exactly the accepted prefix (bench's oracle hook), so the
trajectory is the target's greedy output.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s62/record_rounds.py code,chat out.json
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common  # noqa: E402
from bench.adaptive_calibration import dspark_sync_b1  # noqa: E402
from bench.adaptive_hooks import Hook, OracleAdmission  # noqa: E402

common.setup_threads(1)
sources = sys.argv[1].split(",")
d, ns = dspark_sync_b1(sources)
sets = common.warmed_prompt_sets({"d": d}, ns)
ctl = d.engine.control
v = ctl.verify
out = {"costs": {}, "plain": None, "streams": {}}
out["plain"] = v.plain_ms(1, None)
for G in range(1, 9):
    out["costs"][G] = v.table_ms(1, G)
print("plain", out["plain"], "costs", out["costs"])


class Recording(OracleAdmission):
    def __init__(self, *a):
        super().__init__(*a)
        self.rows = []

    def admit(self, P, round_id=None, max_lens=None, kv_len=None, token_value=1.0):
        self.rows.append(P.detach().double().cpu().numpy()[0].tolist())
        old = max_lens
        lens = super().admit(P, round_id, None, kv_len)  # the accepted prefix at full width
        self.rows[-1] = (self.rows[-1], lens[0], None if old is None else int(old[0]))
        return lens if old is None else [min(a, int(c)) for a, c in zip(lens, old)]


for src in sources:
    prompts = sets[src][:ns.num_prompts]
    # greedy reference: the full-width engine (lossless, so its output is the target's)
    with Hook(d, "prefix", L=7):
        ref = common.serve(d, prompts, 1, 256, ignore_eos=True)
    reference = {tuple(p.ids): o for p, o in zip(prompts, ref.outputs)}
    with Hook(d, "oracle", reference=reference) as h:
        h.oracle = Recording(d.engine, h.recorder, reference)
        d.engine.rounds.verify_controller = h.oracle
        run = common.serve(d, prompts, 1, 256, ignore_eos=True)
    assert run.outputs == ref.outputs
    out["streams"][src] = h.oracle.rows
    ms = [r[1] for r in h.oracle.rows]
    print(src, len(ms), "rounds, mean accepted", sum(ms) / len(ms))
Path(sys.argv[2]).write_text(json.dumps(out))
