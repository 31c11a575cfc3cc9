"""How much could per-round control of the MTP draft step win? Replay policies on held-out decodes (issue 13).

Issue 13 asks an adaptive mode to beat the best single fixed setting by 5% on the mixed stream.
This script measures the ceiling of that with the shipped MTP draft, without the noise of timed
runs: the draft is run teacher-forced over the trainer's held-out sequences (code, chat, prose:
the float32 target's greedy continuations of held-out prompts, `<data_dir>/heldout_eval.pt`;
training/evaluate.simulate, the engine's own draft() code), which gives, at every position, how
many of its k_max proposals greedy verify would accept and the draft's probability of each. A
policy is then replayed as a greedy decode would run it (from each sequence's first generated
position, a round accepting m moves m + 1 on; training/evaluate.decode_acceptance_length) and
charged a calibrated round cost per step count k (`--costs`: ms of a whole round at k = 0..k_max,
e.g. the `Bcap 1: k 0 ..` line of the adaptive draft step's start-up log).

Policies (tokens per ms of the replay; ratios to the best fixed k):
- `fixed k`: k = 1..k_max every round;
- `confidence tau`: draft up to k_max, stop once the cumulative draft probability falls below tau,
  verify the positions at or above it (the first step always runs: its probability is only known
  after it); an unverified row saves `--row_ms`;
- `previous + 1`: k = (tokens accepted in the previous round) + 1, capped at k_max;
- `oracle`: each round takes the k that maximises (accepted + 1) / cost with the acceptance known
  in advance: no causal controller can do better, so it bounds what control can win.

    python bench/step_policies.py --data_dir=runs/stream_data --costs=48.5,57.9,64.6,72.5
"""

from __future__ import annotations

import argparse
import itertools
import operator
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import markdown_table  # noqa: E402

SOURCES = ("code", "chat", "prose")


def replay(sequences: list[tuple[str, list[tuple[int, list[float]]]]], policy, costs: list[float],
           row_ms: float, source: str | None) -> float:
    """Tokens per ms of a greedy decode over `sequences` ((source, [(accepted m, cumulative
    probabilities)] per anchor)) under `policy(previous, cumulative) -> (steps j, verified L)`."""
    tokens = ms = 0.0
    for src, anchors in sequences:
        if source is not None and src != source:
            continue
        n, previous = 0, None
        while n < len(anchors):
            m, cum = anchors[n]
            steps, verified = policy(previous, cum, m)
            accepted = min(m, verified)
            tokens += accepted + 1
            ms += costs[steps] - (steps - verified) * row_ms
            n += accepted + 1
            previous = accepted
    return tokens / ms


def policies(k_max: int, costs: list[float], taus: list[float]) -> dict:
    out = {f"fixed k={k}": (lambda k: lambda prev, cum, m: (k, k))(k) for k in range(1, k_max + 1)}

    def confidence(tau):
        def policy(prev, cum, m):
            steps = 1
            while steps < k_max and cum[steps - 1] >= tau:
                steps += 1
            return steps, sum(c >= tau for c in cum[:steps])
        return policy

    for tau in taus:
        out[f"confidence tau={tau:g}"] = confidence(tau)
    out["previous + 1"] = lambda prev, cum, m: (k := 2 if prev is None else min(k_max, prev + 1), k)
    out["oracle (acceptance known)"] = lambda prev, cum, m: (k := max(range(k_max + 1), key=lambda k: (min(m, k) + 1) / costs[k]), k)
    return out


def held_out_anchors(data_dir: Path, draft_dir: str | None, k_max: int) -> list[tuple[str, list[tuple[int, list[float]]]]]:
    """The MTP draft (`draft_dir`, None: the shipped one) teacher-forced over `data_dir`/heldout_eval.pt:
    per sequence (source, [(accepted m, cumulative draft probability of the first 1..k_max proposals)]
    per anchor). FileNotFoundError when the held-out set is missing. Shared with bench/batch_policies.py."""
    import torch

    from adaspec.drafts.factory import load_drafter
    from adaspec.models.loader import load_model, resolve_model, weights_fingerprint
    from adaspec.training.distill import Sequence
    from adaspec.training.evaluate import per_sequence, simulate

    path = data_dir / "heldout_eval.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (written by adaspec train-draft --kind=both)")
    torch.set_num_threads(1)
    model_dir = resolve_model(None)
    cfg, target = load_model(model_dir, torch.float32, "cpu")
    saved = torch.load(path, weights_only=False)
    held = [Sequence(**d) for d in saved["seqs"]]
    draft = load_drafter(draft_dir, "mtp", target, cfg, "cpu", torch.float32,
                         target_fingerprint=weights_fingerprint(model_dir))
    return [(source, [(m, list(itertools.accumulate(scores, operator.mul))) for m, scores in anchors])
            for source, anchors in per_sequence(simulate(draft, held, saved["key"]["layers"], k_max))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data_dir", required=True, help="a train-draft --kind=both --data_dir (its heldout_eval.pt)")
    p.add_argument("--draft", default=None, help="MTP draft directory (default: the shipped one)")
    p.add_argument("--costs", required=True,
                   help="comma-separated ms of a whole round at k = 0, 1, .., k_max (k = 0: a plain round)")
    p.add_argument("--row_ms", type=float, default=3.0, help="ms one verify row costs (charged back when unverified)")
    p.add_argument("--taus", default="0.1,0.2,0.3", help="comma-separated thresholds of the confidence policy")
    args = p.parse_args(argv)
    try:
        costs = [float(x) for x in args.costs.split(",")]
        taus = [float(x) for x in args.taus.split(",") if x]
    except ValueError:
        p.error("--costs and --taus take comma-separated numbers")
    if len(costs) < 2 or any(c <= 0 for c in costs):
        p.error("--costs needs k = 0 and at least k = 1, every cost > 0")
    k_max = len(costs) - 1

    try:
        sequences = held_out_anchors(Path(args.data_dir), args.draft, k_max)
    except FileNotFoundError as e:
        p.error(f"--data_dir: {e}")
    table = {name: {s: replay(sequences, pol, costs, args.row_ms, None if s == "all" else s)
                    for s in ("all",) + SOURCES} for name, pol in policies(k_max, costs, taus).items()}
    fixed = [n for n in table if n.startswith("fixed")]
    best = {s: max(table[n][s] for n in fixed) for s in ("all",) + SOURCES}
    rows = [[name] + [f"{1000 * v[s]:.1f} ({v[s] / best[s]:.2f}x)" for s in ("all",) + SOURCES]
            for name, v in table.items()]
    print(f"tokens per second of the replay (x best fixed k), round costs {costs} ms at k = 0..{k_max}, "
          f"{len(sequences)} held-out sequences")
    print(markdown_table(["policy", "all (mixed)", *SOURCES], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
