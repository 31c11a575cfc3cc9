"""`adaspec train-draft --kind=both`: the streaming recipe of issue 11 (flags, checks, stages).

Stages (`--stage`, each resumable; rerun the same command to continue):
- `gen`: the target's greedy answers to the training prompts, token ids only (selfdistill.py), for
  at most `--gen_minutes` in total;
- `train`: MTP and DSpark trained together on the teacher's live signals (joint.py) until
  `--positions` distinct positions, `--steps` or `--max_minutes`; it re-reads the answers as they
  are written, so `--stage=gen` and `--stage=train` can run side by side on two cores;
- `all` (default): gen, then train.
`--output` is a directory that receives `mtp/` and `dspark/` (e.g. adaspec/assets/drafts).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..config import ConfigError
from ..errors import InputFileError
from ..flags import fraction, positive_float, positive_int
from ..flags import parse_bool as _bool
from .checks import OWN_OUTPUTS, _writable_dir_or_creatable

DATA_FILES = r"gen_manifest\.json|gen_\d{5}\.pt|windows\.pt|heldout_eval\.pt|.*\.tmp"


def add_stream_flags(parser) -> None:
    g = parser.add_argument_group("streaming recipe (--kind=both)")
    a = g.add_argument
    a("--stage", default="all", choices=("all", "gen", "train"),
      help="--kind=both: run the answer generation, the training, or both in turn (default all)")
    a("--positions", type=positive_int, default=5_000_000,
      help="--kind=both: distinct training positions to train on before stopping (default 5000000)")
    a("--batch_tokens", type=positive_int, default=4096, help="--kind=both: tokens per optimizer step (default 4096)")
    a("--gen_share", type=fraction, default=0.35,
      help="--kind=both: share of each batch taken from the self-distilled answers (default 0.35)")
    a("--gen_repeats", type=positive_int, default=2,
      help="--kind=both: times each answer is read at most (first reads before any repeat; default 2)")
    a("--code_tokens", type=positive_int, default=3_500_000,
      help="--kind=both: raw code tokens (stdlib train files, then installed permissive packages; default 3500000)")
    a("--prose_tokens", type=positive_int, default=1_000_000, help="--kind=both: raw Shakespeare tokens (default 1000000)")
    a("--chat_prompts", type=positive_int, default=4000, help="--kind=both: chat prompts answered by the target (default 4000)")
    a("--code_prompts", type=positive_int, default=1400,
      help="--kind=both: code prompts continued by the target: human-eval train, then stdlib passages (default 1400)")
    a("--prose_prompts", type=positive_int, default=400, help="--kind=both: Shakespeare passages continued (default 400)")
    a("--gen_minutes", type=positive_float, default=40.0,
      help="--kind=both: budget of the generation stage in minutes, across reruns (default 40)")
    a("--curve_prompts", type=positive_int, default=48,
      help="--kind=both: held-out prompts per source for the learning curve (default 48; code and chat, a third as many prose)")
    a("--wall_minutes", type=positive_float, default=None,
      help="--kind=both: wall-clock budget of this run's train stage from its start, set-up and evaluations "
           "included; the loop stops in time to evaluate and save the drafts, and the learning rate decays "
           "over it (default: none, --max_minutes of training alone)")
    a("--curve_points", type=_positions, default=None,
      help="--kind=both: distinct-position counts at which the learning curve is evaluated and the drafts "
           "saved, comma-separated, e.g. 0,1e6,5e6 (default 0,0.1M,0.25M,0.5M,1M,1.5M,2M,3M,4M,...,10M)")
    a("--student_bf16", type=_bool, nargs="?", const=True, default=True, metavar="true|false",
      help="--kind=both: run the students' forward/backward under bfloat16 autocast, fp32 master weights (default true)")


def _positions(text: str) -> tuple[int, ...]:
    """'0,1e6,5e6' -> (0, 1000000, 5000000): ascending non-negative counts."""
    import argparse

    try:
        values = [int(float(v)) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers (e.g. 0,1e6,5e6)") from None
    if not values or any(v < 0 for v in values) or values != sorted(set(values)):
        raise argparse.ArgumentTypeError(f"{text!r}: give ascending, distinct, non-negative position counts (e.g. 0,1e6,5e6)")
    return tuple(values)


def check_joint(args) -> tuple[Path, Path, Path]:
    """(output, data_dir, checkpoint) for --kind=both; refusals name the flag."""
    if args.data_only:
        raise ConfigError("--data_only has no meaning with --kind=both; use --stage=gen", param="--data_only")
    if args.eval_k > args.width:
        raise ConfigError(f"--eval_k={args.eval_k} exceeds --width={args.width}", param="--eval_k")
    output = Path(args.output).expanduser()
    if output.exists() and not output.is_dir():
        raise InputFileError(f"--output={args.output} is a file; --kind=both writes mtp/ and dspark/ into a directory",
                             param="--output")
    if output.is_dir():
        foreign = sorted(p.name for p in output.iterdir() if p.name not in ("mtp", "dspark", "__init__.py", "__pycache__"))
        for sub in ("mtp", "dspark"):
            if (output / sub).is_dir():
                foreign += [f"{sub}/{p.name}" for p in (output / sub).iterdir() if p.name not in OWN_OUTPUTS | {"curve.json"}]
        if foreign:
            raise InputFileError(f"--output={args.output} holds other files ({', '.join(foreign[:3])}); choose a new "
                                 "directory or one that holds only train-draft's mtp/ and dspark/", param="--output")
    _writable_dir_or_creatable(output, "--output")
    if not args.data_dir or not args.checkpoint:
        raise ConfigError("--kind=both needs --data_dir and --checkpoint outside the output directory (the output may "
                          "be the installed package; data and checkpoints must not be shipped)",
                          param="--data_dir" if not args.data_dir else "--checkpoint")
    data_dir = Path(args.data_dir).expanduser()
    if data_dir.exists() and not data_dir.is_dir():
        raise InputFileError(f"--data_dir={data_dir} is a file, not a directory", param="--data_dir")
    if data_dir.is_dir():
        foreign = sorted(p.name for p in data_dir.iterdir() if not re.fullmatch(DATA_FILES, p.name))
        if foreign:
            raise InputFileError(f"--data_dir={data_dir} already holds other files ({', '.join(foreign[:3])}); give "
                                 "a new or empty directory, or an earlier --kind=both data directory", param="--data_dir")
    _writable_dir_or_creatable(data_dir, "--data_dir")
    checkpoint = Path(args.checkpoint).expanduser()
    if checkpoint.is_dir():
        raise InputFileError(f"--checkpoint={checkpoint} is a directory; name a file", param="--checkpoint")
    _writable_dir_or_creatable(checkpoint.parent, "--checkpoint")
    return output, data_dir, checkpoint


def run_joint(args) -> dict:
    import json

    import torch

    from ..models.loader import bundled_gguf_path, check_model_path, load_model, read_model_config, resolve_model
    from ..models.loader import weights_fingerprint
    from ..preflight.model import check_weights, load_tokenizer
    from .checks import flag_warnings
    from .joint import train_joint
    from .selfdistill import GenRecipe, selfdistill

    output, data_dir, checkpoint = check_joint(args)
    for line in flag_warnings(args):
        print(f"adaspec train-draft: warning: {line}", file=sys.stderr)
    args.output, args.data_dir, args.checkpoint = str(output), str(data_dir), str(checkpoint)
    check_model_path(args.model) if args.model is not None else bundled_gguf_path()
    model_dir = resolve_model(args.model)
    cfg = read_model_config(model_dir)
    if args.seq_len > cfg.max_position_embeddings:
        raise ConfigError(f"--seq_len={args.seq_len} exceeds the target's context limit {cfg.max_position_embeddings}",
                          param="--seq_len")
    check_weights(model_dir, cfg)
    tokenizer = load_tokenizer(model_dir, cfg)
    fingerprint = weights_fingerprint(model_dir)
    torch.set_num_threads(args.threads)
    log = lambda m: print(f"[train-draft] {m}", flush=True)  # noqa: E731
    report: dict = {}
    if args.stage in ("all", "gen"):
        recipe = GenRecipe(fingerprint, chat_prompts=args.chat_prompts, code_prompts=args.code_prompts,
                           prose_prompts=args.prose_prompts, prompt_tokens=args.prompt_tokens,
                           gen_tokens=args.gen_tokens, seed=args.seed, chunk=max(384, args.gen_batch))
        _, model = load_model(model_dir, torch.bfloat16, args.device, linear_backend="bf16")
        rows = selfdistill(model, tokenizer, recipe, data_dir, args.gen_minutes, args.gen_batch, log)
        report["gen"] = {"sequences": len(rows), "tokens": sum(len(r["tokens"]) for r in rows)}
        log(f"self-distilled: {report['gen']}")
        del model
    if args.stage in ("all", "train"):
        outputs = {k: output / k for k in ("mtp", "dspark")}
        report.update(train_joint(args, model_dir, tokenizer, cfg, fingerprint, outputs, log))
    print(json.dumps({k: v for k, v in report.items() if k != "curve"}, indent=1), file=sys.stderr, flush=True)
    return report
