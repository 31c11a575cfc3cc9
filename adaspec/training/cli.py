"""`adaspec train-draft`: distil an MTP or DSpark draft for a target (R-B6).

Wiring: `adaspec/cli.py` adds a `train-draft` subparser, calls `add_train_flags(subparser)` and,
for that subcommand, `run_train(args)`. Also runnable as `python -m adaspec.training.cli ...`.

Stages (each resumable; rerun the same command to continue):
1. data (`--data_dir`, shared by both kinds when the data flags agree): the target's greedy
   continuations of the training prompts with its teacher signals (training/distill.py);
2. training (`--checkpoint`, default `<output>/checkpoint.pt`): until `--steps` optimizer steps or
   `--max_minutes` of training, whichever comes first;
3. DSpark only: Sequential Temperature Scaling of the confidence head on validation data;
4. report: per-position conditional acceptance and mean acceptance length (greedy, teacher-forced,
   k=5) on validation data, and the confidence head's ECE before/after scaling; written to
   `<output>/report.json` and printed; the draft is saved to `<output>` (config.json +
   model.safetensors, half precision).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..flags import parse_bool as _bool


def add_train_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    a = parser.add_argument
    a("--kind", required=True, type=str.lower, choices=("mtp", "dspark"), help="draft architecture to train")
    a("--model", default=None, help="target: HF model directory or .gguf file (default: the bundled SmolLM2-135M-Instruct)")
    a("--output", required=True, help="directory the trained draft is written to (config.json, model.safetensors, report.json)")
    a("--data_dir", default=None, help="distillation data directory, shareable between kinds (default: <output>/data)")
    a("--checkpoint", default=None, help="training checkpoint file; rerunning resumes from it (default: <output>/checkpoint.pt)")
    a("--data_only", type=_bool, nargs="?", const=True, default=False, metavar="true|false",
      help="build the distillation data and stop (default false)")
    g = parser.add_argument_group("data")
    g.add_argument("--num_prompts", type=int, default=900, help="prompts the target continues greedily: chat, human-eval, code and prose passages (default 900)")
    g.add_argument("--gen_tokens", type=int, default=192, help="greedy tokens generated per prompt at most (default 192)")
    g.add_argument("--prompt_tokens", type=int, default=192, help="prompts and passages are cut to this many tokens (default 192)")
    g.add_argument("--raw_tokens", type=int, default=60000, help="teacher-only raw text tokens (code and prose, not continued; default 60000)")
    g.add_argument("--topk", type=int, default=32, help="teacher distribution kept as its top-k log-probabilities (default 32)")
    g.add_argument("--gen_batch", type=int, default=48, help="sequences distilled at once (default 48)")
    g.add_argument("--data_minutes", type=float, default=None,
                   help="budget of the data stage in minutes, across reruns; shards are made in an order that mixes "
                        "all sources, and training uses the complete ones (default: no limit)")
    t = parser.add_argument_group("training")
    t.add_argument("--steps", type=int, default=100000, help="optimizer steps in total, across resumes (default 100000; --max_minutes usually ends first)")
    t.add_argument("--max_minutes", type=float, default=15.0, help="wall-clock budget of the training loop in minutes, across resumes (default 15)")
    t.add_argument("--lr", type=float, default=6e-4, help="peak AdamW learning rate; warm-up then cosine decay to 10%% (default 6e-4)")
    t.add_argument("--batch_size", type=int, default=8, help="sequences per optimizer step (default 8)")
    t.add_argument("--seq_len", type=int, default=448, help="longest training window in tokens (default 448)")
    t.add_argument("--draft_vocab", type=int, default=8192, help="size of the draft's output vocabulary: the most frequent target tokens of the data (default 8192)")
    t.add_argument("--unroll", type=int, default=3, help="MTP: steps unrolled on the head's own outputs in training (default 3)")
    t.add_argument("--width", type=int, default=7, choices=(5, 7), help="DSpark: block width w (a w=7 draft also serves w=5; default 7)")
    t.add_argument("--layers", type=int, default=1, help="DSpark: decoder layers of the parallel backbone (default 1)")
    t.add_argument("--rank", type=int, default=128, help="DSpark: rank of the Markov head (default 128)")
    t.add_argument("--anchor_frac", type=float, default=0.35, help="DSpark: share of positions used as block anchors per step (default 0.35)")
    t.add_argument("--ckpt_minutes", type=float, default=4.0, help="minutes between checkpoints (default 4)")
    t.add_argument("--eval_k", type=int, default=5, help="draft length of the acceptance report (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data order, initialisation and passages (default 0)")
    parser.add_argument("--dtype", default="float32", choices=("float32",),
                        help="teacher and training dtype (float32: the CPU trains and matches greedy verify in it)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    return parser


def _check(args) -> None:
    for name in ("num_prompts", "gen_tokens", "prompt_tokens", "topk", "gen_batch", "steps", "batch_size",
                 "seq_len", "draft_vocab", "unroll", "layers", "rank", "threads", "eval_k"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name}={getattr(args, name)}: must be >= 1")
    if args.raw_tokens < 0 or args.max_minutes <= 0:
        raise SystemExit("--raw_tokens must be >= 0 and --max_minutes > 0")
    if not 0 < args.anchor_frac <= 1:
        raise SystemExit(f"--anchor_frac={args.anchor_frac}: must be in (0, 1]")
    if args.kind == "dspark" and args.eval_k > args.width:
        raise SystemExit(f"--eval_k={args.eval_k} exceeds --width={args.width}")


def run_train(args) -> dict:
    """Run all stages for parsed `args`; returns the report (also written to <output>/report.json)."""
    import torch

    from ..drafts.dspark import default_capture_layers
    from ..models.loader import load_model, resolve_model, weights_fingerprint
    from ..models.tokenizer import Tokenizer
    from .distill import DataRecipe, prepare_data

    _check(args)
    if args.threads > 1:
        import os

        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    torch.set_num_threads(args.threads)
    output = Path(args.output)
    data_dir = Path(args.data_dir) if args.data_dir else output / "data"
    t_start = time.perf_counter()

    model_dir = resolve_model(args.model)
    fingerprint = weights_fingerprint(model_dir)
    cfg, target = load_model(model_dir, torch.float32, "cpu")
    tokenizer = Tokenizer(model_dir)
    layers = tuple(sorted(set(default_capture_layers(cfg.num_layers)) | {cfg.num_layers - 1}))
    recipe = DataRecipe(
        fingerprint=fingerprint, num_prompts=args.num_prompts, gen_tokens=args.gen_tokens,
        prompt_tokens=args.prompt_tokens, raw_tokens=args.raw_tokens, topk=args.topk,
        teacher_layers=layers, seed=args.seed,
    )
    print(f"[train-draft] target {model_dir} ({fingerprint}); data in {data_dir}", flush=True)
    manifest = prepare_data(target, tokenizer, recipe, data_dir, max_batch=args.gen_batch,
                            log=lambda m: print(f"[train-draft] {m}", flush=True), max_minutes=args.data_minutes)
    print(f"[train-draft] data: {manifest['tokens']} tokens in {sum(v['sequences'] for v in manifest['shards'].values())} "
          f"of {manifest['num_items']} sequences "
          f"({manifest['seconds'] / 60:.1f} min to distil)", flush=True)
    if args.data_only:
        return {"data": manifest}

    from .trainer import train_and_report

    report = train_and_report(args, target, cfg, fingerprint, recipe, data_dir, output)
    report["total_minutes_this_run"] = round((time.perf_counter() - t_start) / 60, 2)
    (output / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1), flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="adaspec train-draft", description=__doc__.split("\n")[0])
    add_train_flags(parser)
    run_train(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
