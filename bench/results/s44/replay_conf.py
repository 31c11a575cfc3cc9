"""The adaptive draft step's controller, and the confidence stop, replayed at B = 1 over teacher-forced held-out anchors.

Stop 44 (issue 13): the engine's DraftStepController (default policy) plans every round of a greedy decode of the
held-out sequences, served one at a time in the mixed order (code, chat, prose, ...); each anchor's accepted count at
k_max is known (bench/step_policies.held_out_anchors, the shipped MTP draft), a round at k accepts min(m, k), and
with a confidence stop tau it drafts and verifies up to the first step whose cumulative draft probability is below tau.
Rounds are charged the B = 1 table (ms at k = 0..5, this VM's calibration). Ratios to the best fixed k.

    OMP_NUM_THREADS=1 python bench/results/s40/build_heldout.py runs/heldout_s44   # ~180-250 s
    OMP_NUM_THREADS=1 python bench/results/s44/replay_conf.py runs/heldout_s44
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from adaspec.adaptive.step_controller import DraftStepController, StepPolicy  # noqa: E402
from bench.step_policies import held_out_anchors  # noqa: E402

COSTS = [25.59, 27.24, 30.25, 34.91, 38.05, 41.92]  # B = 1, k = 0..5 (stop 44 calibration, fp16w, one thread)


def replay(order, tau=None, fixed=None):
    ctl = None if fixed is not None else DraftStepController(
        5, StepPolicy(confidence_stop=0.0), lambda b, k: COSTS[k], lambda b: 1, lag=1)
    tokens = ms = 0.0
    r, last = 0, None
    for rid, (_, anchors) in enumerate(order):
        n = 0
        while n < len(anchors):
            m, cum = anchors[n]
            if ctl is not None:
                if last:
                    ctl.observe(*last)
                kc = ctl.plan(1, round_id=r, requests=[rid])
            else:
                kc = fixed
            k = kc if tau is None or kc == 0 else next((j for j in range(1, kc + 1) if cum[j - 1] < tau), kc)
            acc = min(m, k)
            tokens, ms, n = tokens + acc + 1, ms + COSTS[k], n + acc + 1
            last, r = ([k], [acc], r), r + 1
    return tokens / ms


if __name__ == "__main__":
    seqs = held_out_anchors(Path(sys.argv[1]), None, 5)
    by = {s: [x for x in seqs if x[0] == s] for s in ("code", "chat", "prose")}
    order = [by[s][i] for i in range(max(map(len, by.values()))) for s in by if i < len(by[s])]
    best = max(replay(order, fixed=k) for k in range(1, 6))
    print("| tau | controller + stop | fixed k = 5 + stop |\n| --- | ---: | ---: |")
    for tau in (None, 0.2, 0.3, 0.4, 0.5, 0.6):
        print(f"| {tau or 'off'} | {replay(order, tau) / best:.3f} | {replay(order, tau, fixed=5) / best:.3f} |")
