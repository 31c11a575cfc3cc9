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

from ..outputs import replace_file
from ..flags import fraction, integer, nonnegative_int, positive_float, positive_int, thread_count
from ..flags import parse_bool as _bool


def add_train_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    a = parser.add_argument
    a("--kind", required=True, type=str.lower, choices=("mtp", "dspark", "both"),
      help="draft architecture to train; both: MTP and DSpark together with the streaming recipe (issue 11, "
           "docs/TRAINING.md)")
    a("--model", default=None, help="target: HF model directory or .gguf file (default: the bundled SmolLM2-135M-Instruct)")
    a("--output", required=True, help="directory the trained draft is written to (config.json, model.safetensors, report.json)")
    a("--data_dir", default=None, help="distillation data directory, shareable between kinds (default: <output>/data)")
    a("--checkpoint", default=None, help="training checkpoint file; rerunning resumes from it (default: <output>/checkpoint.pt)")
    a("--data_only", type=_bool, nargs="?", const=True, default=False, metavar="true|false",
      help="build the distillation data and stop (default false)")
    g = parser.add_argument_group("data")
    g.add_argument("--num_prompts", type=positive_int, default=900, help="prompts the target continues greedily: chat, human-eval, code and prose passages (default 900)")
    g.add_argument("--gen_tokens", type=positive_int, default=192, help="greedy tokens generated per prompt at most (default 192)")
    g.add_argument("--prompt_tokens", type=positive_int, default=192, help="prompts and passages are cut to this many tokens (default 192)")
    g.add_argument("--raw_tokens", type=nonnegative_int, default=60000, help="teacher-only raw text tokens (code and prose, not continued; default 60000)")
    g.add_argument("--topk", type=positive_int, default=32, help="teacher distribution kept as its top-k log-probabilities (default 32)")
    g.add_argument("--gen_batch", type=positive_int, default=48, help="sequences distilled at once (default 48)")
    g.add_argument("--data_minutes", type=positive_float, default=None,
                   help="budget of the data stage in minutes, across reruns; shards are made in an order that mixes "
                        "all sources, and training uses the complete ones (default: no limit)")
    t = parser.add_argument_group("training")
    t.add_argument("--steps", type=positive_int, default=100000, help="optimizer steps in total, across resumes (default 100000; --max_minutes usually ends first)")
    t.add_argument("--max_minutes", type=positive_float, default=15.0, help="wall-clock budget of the training loop in minutes, across resumes (default 15)")
    t.add_argument("--lr", type=positive_float, default=6e-4, help="peak AdamW learning rate; warm-up then cosine decay to 10%% (default 6e-4)")
    t.add_argument("--batch_size", type=positive_int, default=8, help="sequences per optimizer step (default 8)")
    t.add_argument("--seq_len", type=positive_int, default=448, help="longest training window in tokens (default 448)")
    t.add_argument("--draft_vocab", type=positive_int, default=8192, help="size of the draft's output vocabulary: the most frequent target tokens of the data (default 8192)")
    t.add_argument("--unroll", type=positive_int, default=3, help="MTP: steps unrolled on the head's own outputs in training (default 3)")
    t.add_argument("--width", type=integer, default=7, choices=(5, 7), help="DSpark: block width w (a w=7 draft also serves w=5; default 7)")
    t.add_argument("--layers", type=positive_int, default=1, help="DSpark: decoder layers of the parallel backbone (default 1)")
    t.add_argument("--rank", type=positive_int, default=128, help="DSpark: rank of the Markov head (default 128)")
    t.add_argument("--anchor_frac", type=fraction, default=0.35, help="DSpark: share of positions used as block anchors per step (default 0.35)")
    t.add_argument("--ckpt_minutes", type=positive_float, default=4.0, help="minutes between checkpoints (default 4)")
    t.add_argument("--eval_k", type=positive_int, default=5, help="draft length of the acceptance report (default 5)")
    from .joint_cli import add_stream_flags

    add_stream_flags(parser)
    parser.add_argument("--seed", type=integer, default=0, help="seed of data order, initialisation and passages (default 0)")
    parser.add_argument("--dtype", default="float32", choices=("float32",),
                        help="teacher and training dtype (float32: the CPU trains and matches greedy verify in it)")
    parser.add_argument("--threads", type=thread_count, default=1, help="CPU threads (default 1)")
    parser.add_argument("--device", default="cpu", type=str.lower, choices=("cpu", "cuda"),
                        help="where the target and the students run; cuda needs --kind=both (the streaming recipe, "
                             "scripts/train_drafts_gpu.sh) and a CUDA build of torch (default cpu)")
    return parser


def check_device(args) -> None:
    """--device: cuda only for --kind=both and only where torch sees a GPU (before any work)."""
    from ..config import ConfigError

    if args.device == "cpu":
        return
    if args.kind != "both":
        raise ConfigError(f"--device={args.device} is supported with --kind=both only (the streaming recipe); "
                          "use --device=cpu for --kind=mtp or --kind=dspark", param="--device")
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"--device={args.device}: torch sees no CUDA device (torch {torch.__version__}); "
                          "use --device=cpu", param="--device")


def run_train(args) -> dict:
    """Run all stages for parsed `args`; returns the report (also written to <output>/report.json)."""
    import torch

    from ..drafts.dspark import default_capture_layers
    from ..models.loader import bundled_gguf_path, check_model_path, load_model, read_model_config, resolve_model
    from ..models.loader import weights_fingerprint
    from ..preflight.model import check_weights, load_tokenizer
    from .checks import check_against_target, check_flags, check_paths, flag_warnings
    from .distill import DataRecipe, prepare_data

    check_device(args)
    if args.kind == "both":
        from .joint_cli import run_joint

        return run_joint(args)
    # every check before the target loads (issue 8)
    check_flags(args)
    output, data_dir, checkpoint = check_paths(args)
    args.output, args.data_dir, args.checkpoint = str(output), str(data_dir), str(checkpoint)  # ~ expanded
    if args.model is not None:
        check_model_path(args.model)
    else:
        bundled_gguf_path()
    model_dir = resolve_model(args.model)
    cfg = read_model_config(model_dir)
    check_weights(model_dir, cfg)
    tokenizer = load_tokenizer(model_dir, cfg)
    fingerprint = weights_fingerprint(model_dir)
    layers = tuple(sorted(set(default_capture_layers(cfg.num_layers)) | {cfg.num_layers - 1}))
    recipe = DataRecipe(
        fingerprint=fingerprint, num_prompts=args.num_prompts, gen_tokens=args.gen_tokens,
        prompt_tokens=args.prompt_tokens, raw_tokens=args.raw_tokens, topk=args.topk,
        teacher_layers=layers, seed=args.seed,
    )
    check_against_target(args, cfg, data_dir, checkpoint, recipe.to_json())
    for line in flag_warnings(args):
        print(f"adaspec train-draft: warning: {line}", file=sys.stderr)

    if args.threads > 1:
        import os

        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    cfg, target = load_model(model_dir, torch.float32, "cpu")
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
    replace_file(output / "report.json", (json.dumps(report, indent=1) + "\n").encode())  # atomic: never half-written
    print(json.dumps(report, indent=1), flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    """`python -m adaspec.training.cli ...` is `adaspec train-draft ...` (same errors and exit codes)."""
    from ..cli import main as adaspec_main

    return adaspec_main(["train-draft", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
