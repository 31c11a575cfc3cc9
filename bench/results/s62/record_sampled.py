"""Stop 62: as record_rounds.py, at a temperature: every round of DSpark w = 7 at B = 1 verifying full width
(the prefix hook at L = 7), its path probabilities P and the drafts it accepted (m, of 7), for offline_admission.py.
With the engine's seeded sampling a shorter verify accepts min(m, L) of the same round (the acceptance test of
position j does not depend on how many positions follow it); the trajectory is the target's sampled output.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s62/record_sampled.py code,chat 0.8 out.json
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common  # noqa: E402
from bench.adaptive_calibration import dspark_sync_b1  # noqa: E402
from bench.adaptive_hooks import Hook, RecordingDrafter  # noqa: E402
from adaspec.adaptive.host_paths import clean_rows  # noqa: E402
from adaspec.adaptive.scoring import path_probabilities  # noqa: E402

common.setup_threads(1)
sources, temp = sys.argv[1].split(","), float(sys.argv[2])
d, ns = dspark_sync_b1(sources)
sets = common.warmed_prompt_sets({"d": d}, ns)
v = d.engine.control.verify
d.engine.control.floor = None  # every round drafts (the plain floor's skipped rounds would have no P of their own)
out = {"plain": v.plain_ms(1, None), "costs": {G: v.table_ms(1, G) for G in range(1, 9)}, "streams": {},
       "temperature": temp}
rounds = []


for src in sources:
    rounds = []
    with Hook(d, "prefix", L=7):
        rec = RecordingDrafter(d.engine.rounds.drafter)
        d.engine.rounds.drafter = rec
        serve_stats = common.RoundRecorder

        class Rec(common.RoundRecorder):
            def observe(self, verify_lens, accepted):
                if verify_lens and rec.last is not None:
                    P = clean_rows(path_probabilities(rec.last[1].scores))[0]
                    rounds.append((P, int(accepted[0]), int(verify_lens[0])))
                super().observe(verify_lens, accepted)
        common.RoundRecorder = Rec
        try:
            common.serve(d, sets[src][:ns.num_prompts], 1, 256, ignore_eos=True, temperature=temp)
        finally:
            common.RoundRecorder = serve_stats
            d.engine.rounds.drafter = rec.inner
    out["streams"][src] = [(P, m, L if L < 7 else None) for P, m, L in rounds]
    print(src, len(rounds), "rounds, mean accepted", sum(r[1] for r in rounds) / len(rounds), flush=True)
Path(sys.argv[3]).write_text(json.dumps(out))
