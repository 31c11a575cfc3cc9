"""`adaspec train-draft`: every flag, path and model fact checked before the target loads (issue 8, R-B6).

Flag values are typed at parse time (adaspec/flags.py: NaN/inf and out-of-range numbers are refused
then). Here: cross-flag rules, flags that have no effect for `--kind` (warned), the output, data and
checkpoint paths (never a file where a directory belongs, never an unrelated non-empty directory,
an existing data directory or checkpoint only when it belongs to this recipe/architecture), and
what the target's config.json decides (context length, vocabulary). Every refusal is a UserError
naming the flag.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..config import ConfigError
from ..errors import InputFileError, UserError

# files a train-draft output directory may already hold (a previous or interrupted run of it)
OWN_OUTPUTS = {"config.json", "model.safetensors", "report.json", "checkpoint.pt", "data"}
MTP_ONLY = ("unroll",)
DSPARK_ONLY = ("width", "layers", "rank", "anchor_frac")
# the streaming recipe's own flags (--kind=both, joint_cli.py) and the stored-signal recipe's (--kind=mtp/dspark)
STREAM_ONLY = ("stage", "positions", "batch_tokens", "gen_share", "gen_repeats", "code_tokens", "prose_tokens",
               "chat_prompts", "code_prompts", "prose_prompts", "gen_minutes", "curve_prompts", "wall_minutes",
               "curve_points", "student_bf16")
STORED_ONLY = ("num_prompts", "raw_tokens", "data_minutes", "batch_size")
TRAINING_FLAGS = ("steps", "max_minutes", "lr", "batch_size", "seq_len", "draft_vocab", "unroll", "width", "layers",
                  "rank", "anchor_frac", "ckpt_minutes", "eval_k", "checkpoint")


def flag_warnings(args) -> list[str]:
    """Flags given on the command line that change nothing for this run (README: warned)."""
    given = {f.lstrip("-") for f in getattr(args, "explicit_flags", ())}

    def unused(names, why: str) -> list[str]:
        names = [f"--{n}" for n in names if n in given]
        return [f"{', '.join(names)} {'has' if len(names) == 1 else 'have'} no effect {why}"] if names else []

    if args.kind == "both":
        return unused(STORED_ONLY, "with --kind=both (the streaming recipe sizes its data with --chat_prompts, "
                                   "--code_tokens, ... and its steps with --batch_tokens)")
    out = []
    other = DSPARK_ONLY if args.kind == "mtp" else MTP_ONLY
    for name in other:
        if name in given:
            out.append(f"--{name} has no effect with --kind={args.kind} (it is a "
                       f"{'DSpark' if args.kind == 'mtp' else 'MTP'} flag)")
    out += unused(STREAM_ONLY, f"with --kind={args.kind} (streaming-recipe flags: they apply to --kind=both)")
    if args.data_only:
        out += unused(TRAINING_FLAGS, "with --data_only=true (nothing is trained)")
    return out


def check_flags(args) -> None:
    """Cross-flag rules (ranges are typed at parse time; these repeat them for callers that build args)."""
    for name in ("num_prompts", "gen_tokens", "prompt_tokens", "topk", "gen_batch", "steps", "batch_size",
                 "seq_len", "draft_vocab", "unroll", "layers", "rank", "threads", "eval_k"):
        v = getattr(args, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"--{name}={v}: must be an integer >= 1", param=f"--{name}")
    if isinstance(args.raw_tokens, bool) or not isinstance(args.raw_tokens, int) or args.raw_tokens < 0:
        raise ConfigError(f"--raw_tokens={args.raw_tokens}: must be an integer >= 0", param="--raw_tokens")
    for name in ("max_minutes", "lr", "ckpt_minutes", "data_minutes"):
        v = getattr(args, name)
        if v is None and name == "data_minutes":
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0 or v == float("inf"):
            raise ConfigError(f"--{name}={v}: must be a positive finite number", param=f"--{name}")
    if not 0 < args.anchor_frac <= 1:
        raise ConfigError(f"--anchor_frac={args.anchor_frac}: must be in (0, 1]", param="--anchor_frac")
    if args.kind == "dspark" and args.eval_k > args.width:
        raise ConfigError(f"--eval_k={args.eval_k} exceeds --width={args.width}: a DSpark draft proposes at most "
                          "its width", param="--eval_k")


def _writable_dir_or_creatable(path: Path, flag: str) -> None:
    """`path` is a directory we may write, or can be created (its nearest existing ancestor is a writable dir)."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise InputFileError(f"{flag}={path}: {str(probe)!r} is a file, so the directory cannot be created there",
                             param=flag)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputFileError(f"{flag}={path}: {str(probe)!r} is not writable", param=flag)


def check_paths(args) -> tuple[Path, Path, Path]:
    """(output, data_dir, checkpoint): the right kind, writable, and not someone else's files."""
    output = Path(args.output).expanduser()
    if not str(args.output).strip():
        raise InputFileError("--output= is empty: name the directory the draft is written to", param="--output")
    for flag in ("data_dir", "checkpoint"):  # an empty value would silently mean the default
        if getattr(args, flag) is not None and not str(getattr(args, flag)).strip():
            raise InputFileError(f"--{flag}= is empty: give a path, or leave the flag out for the default "
                                 f"(<output>/{'data' if flag == 'data_dir' else 'checkpoint.pt'})", param=f"--{flag}")
    if output.exists() and not output.is_dir():
        raise InputFileError(f"--output={args.output} is a file; the draft is a directory (config.json + "
                             "model.safetensors): choose a new directory name", param="--output")
    if output.is_dir():
        foreign = sorted(p.name for p in output.iterdir() if p.name not in OWN_OUTPUTS and not p.name.endswith(".tmp"))
        if foreign:
            raise InputFileError(f"--output={args.output} already holds other files ({', '.join(foreign[:3])}); "
                                 "train-draft writes config.json and model.safetensors there, so choose a new or "
                                 "empty directory (rerunning into a train-draft output resumes it)", param="--output")
        cfg = output / "config.json"
        if cfg.is_file():
            try:
                ok = json.loads(cfg.read_text(encoding="utf-8")).get("format") == "adaspec-draft"
            except (ValueError, OSError, AttributeError):
                ok = False
            if not ok:
                raise InputFileError(f"--output={args.output} holds a config.json that is not an adaspec draft; "
                                     "choose another directory", param="--output")
    _writable_dir_or_creatable(output, "--output")
    data_dir = Path(args.data_dir).expanduser() if args.data_dir else output / "data"
    if data_dir.exists() and not data_dir.is_dir():
        raise InputFileError(f"--data_dir={data_dir} is a file, not a directory", param="--data_dir")
    if data_dir.is_dir():  # shards and a manifest are written there: never into someone else's directory
        foreign = sorted(p.name for p in data_dir.iterdir()
                         if not re.fullmatch(r"manifest\.json|shard_\d{5}\.pt|.*\.tmp", p.name))
        if foreign:
            raise InputFileError(f"--data_dir={data_dir} already holds other files ({', '.join(foreign[:3])}); the "
                                 "distillation data (manifest.json, shard_*.pt) needs a new or empty directory, or an "
                                 "earlier train-draft data directory", param="--data_dir")
    _writable_dir_or_creatable(data_dir, "--data_dir")
    checkpoint = Path(args.checkpoint).expanduser() if args.checkpoint else output / "checkpoint.pt"
    if checkpoint.is_dir():
        raise InputFileError(f"--checkpoint={checkpoint} is a directory; name a file (e.g. {checkpoint / 'ckpt.pt'})",
                             param="--checkpoint")
    _writable_dir_or_creatable(checkpoint.parent, "--checkpoint")
    return output, data_dir, checkpoint


def check_against_target(args, cfg, data_dir: Path, checkpoint: Path, recipe_json: dict) -> None:
    """What config.json decides, and that existing data / checkpoint belong to this run (no weights loaded)."""
    limit = cfg.max_position_embeddings
    if args.seq_len > limit:
        raise ConfigError(f"--seq_len={args.seq_len} exceeds the target's context limit {limit}", param="--seq_len")
    if args.prompt_tokens + args.gen_tokens > limit:
        raise ConfigError(f"--prompt_tokens={args.prompt_tokens} + --gen_tokens={args.gen_tokens} exceed the "
                          f"target's context limit {limit}", param="--gen_tokens")
    # the default --draft_vocab is capped at the vocabulary (select_vocab); a value the user gave is not.
    # --topk cannot exceed it in any case (the teacher's top-k of a smaller distribution does not exist)
    given = set(getattr(args, "explicit_flags", ()))
    for name in ("draft_vocab", "topk"):
        if (name == "topk" or f"--{name}" in given) and getattr(args, name) > cfg.vocab_size:
            raise ConfigError(f"--{name}={getattr(args, name)} exceeds the target's vocabulary ({cfg.vocab_size} "
                              "tokens)", param=f"--{name}")
    vocab = min(args.draft_vocab, cfg.vocab_size)
    if args.kind == "dspark" and args.rank > vocab:  # W1 [N+1, r] @ W2 [r, N] has rank <= N: the rest is waste
        raise ConfigError(f"--rank={args.rank} exceeds the draft vocabulary ({vocab} tokens), which bounds the rank of "
                          f"the Markov head; use at most --rank={vocab}", param="--rank")
    manifest = data_dir / "manifest.json"
    if manifest.is_file():
        try:
            stored = json.loads(manifest.read_text(encoding="utf-8")).get("recipe")
        except (ValueError, OSError, AttributeError):
            raise InputFileError(f"--data_dir={data_dir}: manifest.json is damaged; pass another --data_dir",
                                 param="--data_dir") from None
        if stored != recipe_json:
            diff = sorted(k for k in recipe_json if (stored or {}).get(k) != recipe_json[k])
            raise InputFileError(f"--data_dir={data_dir} holds data of another recipe (differs in {', '.join(diff)}); "
                                 "pass another --data_dir or the same data flags", param="--data_dir")
    if checkpoint.is_file() and not args.data_only:
        _check_checkpoint(args, checkpoint)


def _check_checkpoint(args, checkpoint: Path) -> None:
    import torch

    from .trainer import _arch

    try:
        state = torch.load(checkpoint, weights_only=False, map_location="cpu")
        kind, arch = state["kind"], state["arch"]
    except Exception as e:  # noqa: BLE001 - any unreadable checkpoint is the user's file, not a bug
        raise InputFileError(f"--checkpoint={checkpoint} cannot be read ({type(e).__name__}); pass another "
                             "--checkpoint or remove it to start over", param="--checkpoint") from None
    if kind != args.kind or arch != _arch(args):
        raise UserError(f"--checkpoint={checkpoint} belongs to another run ({kind} {arch}); pass another "
                        "--checkpoint or --output", param="--checkpoint")
