"""The drafts' learning curve (issue 11): held-out acceptance against training positions, and cost.

Reads the `curve.json` that `adaspec train-draft --kind=both` writes (one point per evaluation:
per-position conditional acceptance and mean acceptance length, k=5, on held-out prompts never
trained on: the float32 target's greedy continuations, teacher-forced through the draft's own
allocate()/draft()). Two lengths: over anchors (every position counted once), and "decode", the
tokens per round of a greedy decode walking the same sequences (training/evaluate.py
`decode_acceptance_length`; the engine's figure; points written before it existed show "-").
It prints the curve as a markdown table, draws it as a PNG (matplotlib), and evaluates drafts
(`--drafts`) on the same held-out set: drafts of this recipe (their config.json records the
positions they were trained on) are drawn at those positions with their decode walk, others (e.g.
another recipe's) as reference lines. With `--cost`, each draft's cost per draft call (B=1, k=5,
float32, one thread) is timed against one plain target step, in the same process.

    python bench/draft_curve.py --curve=runs/drafts_new/mtp/curve.json --data_dir=runs/stream_data \
        --drafts=mtp:adaspec/assets/drafts/mtp,dspark:adaspec/assets/drafts/dspark --png=docs/draft_curve.png --cost
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import markdown_table  # noqa: E402

SOURCES = ("code", "chat", "prose")


def curve_rows(curve: list[dict]) -> list[list]:
    rows = []
    for p in curve:
        for kind in ("mtp", "dspark"):
            held = p[kind]["heldout"]
            cells = [f"{held[s]['mean_acceptance_length']:.2f}" if s in held else "-" for s in SOURCES]
            cond = held.get("code", {}).get("conditional_acceptance", [])
            rows.append([f"{p['positions'] / 1e6:.2f}M", kind, *cells, _decode_cells(held),
                         " / ".join(f"{c:.2f}" for c in cond)])
    return rows


def _decode_cells(stats: dict) -> str:
    """code / chat / prose tokens per round of a greedy decode, or '-' where a point lacks them."""
    vals = [stats.get(s, {}).get("decode_acceptance_length") for s in SOURCES]
    return " / ".join("-" if v is None else f"{v:.2f}" for v in vals)


def plot(curve: list[dict], refs: dict, path: str, walks: dict | None = None, ref_curve: list[dict] | None = None) -> None:
    """The curve's anchor means (solid) and decode walk (dashed, where its points have one); a
    reference run's curve (`ref_curve`, dotted, anchor means); the decode walk of every --drafts whose
    config records its training positions (crosses, evaluated here), and the first other --drafts of
    each kind (horizontal dotted line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, kind in zip(axes, ("mtp", "dspark")):
        xs = [max(p["positions"], 1) / 1e6 for p in curve]
        for s in SOURCES:
            ys = [p[kind]["heldout"].get(s, {}).get("mean_acceptance_length") for p in curve]
            ax.plot(xs, ys, marker="o", label=s)
            color = ax.lines[-1].get_color()
            dec = [(x, p[kind]["heldout"].get(s, {}).get("decode_acceptance_length")) for x, p in zip(xs, curve)]
            dec = [(x, y) for x, y in dec if y is not None]
            if dec:
                ax.plot(*zip(*dec), ls="--", marker="s", ms=3, color=color, label=f"{s}, decode walk")
            if ref_curve:
                ref = [(max(p["positions"], 1) / 1e6, p[kind]["heldout"].get(s, {}).get("mean_acceptance_length"))
                       for p in ref_curve if kind in p]
                ref = [(x, y) for x, y in ref if y is not None]
                if ref:
                    ax.plot(*zip(*ref), ls=":", marker=".", color=color, alpha=0.7, label=f"{s}, reference run")
            if kind in refs and s in refs[kind]:
                ax.axhline(refs[kind][s]["mean_acceptance_length"], ls=":", lw=1, color=color)
            pts = sorted((pos / 1e6, st[s]["decode_acceptance_length"]) for pos, st in (walks or {}).get(kind, [])
                         if st.get(s, {}).get("decode_acceptance_length") is not None)
            if pts:
                ax.plot(*zip(*pts), ls="none", marker="x", ms=8, color=color, label=f"{s}, saved draft's decode walk")
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_title(f"{kind}: solid anchors, dashed decode walk")
        ax.set_xlabel("distinct training positions seen (M)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out mean acceptance length (k=5, greedy)")
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--curve", required=True, help="curve.json of a --kind=both run")
    p.add_argument("--data_dir", default=None, help="the run's --data_dir (its heldout_eval.pt), for --drafts and --cost")
    p.add_argument("--drafts", default="", help="kind:dir,... reference drafts evaluated on the same held-out set")
    p.add_argument("--png", default=None, help="write the curve as a PNG here")
    p.add_argument("--ref_curve", default=None, help="curve.json of another run, drawn dotted for comparison")
    p.add_argument("--cost", action="store_true", help="time each draft call against a plain target step")
    args = p.parse_args(argv)
    curve = json.loads(Path(args.curve).read_text())
    print(markdown_table(["positions", "draft", "code", "chat", "prose", "decode: code / chat / prose",
                          "code: conditional acceptance 1..5"], curve_rows(curve)))
    refs, walks = {}, {}
    if args.drafts or args.cost:
        import torch

        from adaspec.drafts.factory import load_drafter
        from adaspec.models.loader import load_model, resolve_model, weights_fingerprint
        from adaspec.training.distill import Sequence
        from adaspec.training.joint import curve_point

        torch.set_num_threads(1)
        model_dir = resolve_model(None)
        cfg, target = load_model(model_dir, torch.float32, "cpu")
        saved = torch.load(Path(args.data_dir) / "heldout_eval.pt", weights_only=False)
        held = [Sequence(**d) for d in saved["seqs"]]
        layers = saved["key"]["layers"]
        rows = []
        dirs = [d.split(":", 1) for d in args.drafts.split(",") if d]
        for kind, d in dirs:
            draft = load_drafter(d, kind, target, cfg, "cpu", torch.float32, target_fingerprint=weights_fingerprint(model_dir))
            stats = curve_point(draft, held, layers, 5)
            trained = json.loads((Path(d) / "config.json").read_text()).get("report", {}).get("training", {})
            if "positions" in trained:  # a draft of this recipe: its decode walk goes on the curve
                walks.setdefault(kind, []).append((trained["positions"], stats))
            else:  # another recipe's draft: a reference line
                refs.setdefault(kind, stats)
            row = [d, kind] + [f"{stats[s]['mean_acceptance_length']:.2f}" if s in stats else "-" for s in SOURCES]
            row.append(_decode_cells(stats))
            if args.cost:
                row.append(f"{draft_cost(draft, target, cfg):.2f}")
            rows.append(row)
        head = ["draft dir", "kind", "code", "chat", "prose", "decode: code / chat / prose"] + (["draft call / target step (B=1, k=5)"] if args.cost else [])
        print(markdown_table(head, rows))
    if args.png:
        ref_curve = json.loads(Path(args.ref_curve).read_text()) if args.ref_curve else None
        plot(curve, refs, args.png, walks, ref_curve)
        print(f"wrote {args.png}")
    return 0


def draft_cost(draft, target, cfg, reps: int = 30) -> float:
    """Median time of one draft call (1 request, refresh 1 row, k=5) over one plain target step."""
    import statistics

    import torch

    from adaspec.drafts.base import DraftBatch
    from adaspec.models.attention import build_layout
    from adaspec.runner.kv_cache import KVCache

    L = 256
    kv = KVCache(cfg.num_layers, 1, cfg.num_kv_heads, L + 8, cfg.head_dim, torch.float32)
    ids = torch.randint(0, cfg.vocab_size, (L,))
    h, caps = target(ids, build_layout([0], [0], [L]), kv, tuple(draft.capture_layers or ()))
    feats = torch.cat(caps, -1) if caps else h
    draft.allocate(1, L + 16)
    draft.draft(DraftBatch([0], [0], [L - 1], feats[: L - 1], ids[1:L], 5))
    t_draft, t_target = [], []
    for i in range(reps):
        t0 = time.perf_counter()
        draft.draft(DraftBatch([0], [L - 1 - 1], [1], feats[L - 2:L - 1], ids[L - 1:L], 5))
        t_draft.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        hh, _ = target(ids[-1:], build_layout([0], [L - 1], [1]), kv)
        target.logits(hh)
        t_target.append(time.perf_counter() - t0)
    return statistics.median(t_draft) / statistics.median(t_target)


if __name__ == "__main__":
    from adaspec.hugepages import reexec_with_hugepages

    reexec_with_hugepages()  # before any work: huge pages, as the `adaspec` command runs
    sys.exit(main())
