"""Build, save and load drafts. The only place that maps a kind name to a draft class.

A saved draft is a directory:
- `config.json`: format, kind, architecture numbers (width, layers, rank, draft vocabulary size,
  capture layers), the target it was made for (weights fingerprint, vocabulary, hidden size,
  layer count), the recipe that trained it and its training report;
- `model.safetensors`: the draft's own tensors in half precision (float16; bfloat16 if a value
  does not fit), cast to the engine's dtype on load. The target's embedding and output rows are
  not stored: they are shared with (and rebuilt from) the target.

Loading a draft made for another target is refused with an error that names the mismatch.
"""

from __future__ import annotations

from ..errors import UserError

import hashlib
import json
import os
from pathlib import Path

import torch

from ..models.config import ModelConfig
from .base import Drafter
from .dspark import DSparkDraft
from .mtp import MTPDraft

FORMAT = "adaspec-draft"
FORMAT_VERSION = 1
KINDS = ("mtp", "dspark")
MODEL_FREE = ("suffix", "mtp+suffix")  # --speculative_algorithm values built here without (only) a draft file
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "assets" / "drafts"


class DraftLoadError(UserError, ValueError):
    """The draft cannot serve this target or cannot be found; the message says what to do."""


def shipped_draft_dir(kind: str) -> Path:
    return SHIPPED_DIR / kind


def build_draft(kind: str, cfg: ModelConfig, d2t: torch.Tensor, **arch) -> MTPDraft | DSparkDraft:
    """A fresh (untrained) draft of `kind` for a target with config `cfg`."""
    kind = kind.lower()
    if kind == "mtp":
        return MTPDraft(cfg, d2t, **{k: v for k, v in arch.items() if k in ("max_steps",)})
    if kind == "dspark":
        allowed = ("width", "num_layers", "rank", "capture_layers", "direct_input")
        return DSparkDraft(cfg, d2t, **{k: v for k, v in arch.items() if k in allowed})
    raise DraftLoadError(f"unknown draft kind {kind!r}: expected one of {', '.join(KINDS)}")


def target_info(cfg: ModelConfig, fingerprint: str | None) -> dict:
    return {
        "fingerprint": fingerprint,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_layers": cfg.num_layers,
        "num_kv_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
    }


def save_draft(
    draft: MTPDraft | DSparkDraft,
    directory: str | os.PathLike,
    target_fingerprint: str | None,
    recipe: dict | None = None,
    report: dict | None = None,
) -> Path:
    """Write `config.json` + `model.safetensors` (half precision) into `directory` (created)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {}
    for name, t in draft.state_dict().items():
        t = t.detach().cpu()
        if t.is_floating_point():
            finite_max = float(t.float().abs().max()) if t.numel() else 0.0
            t = t.to(torch.float16 if finite_max < 6e4 else torch.bfloat16)
        state[name] = t.contiguous()
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        **draft.config_dict(),
        "target": target_info(draft.cfg, target_fingerprint),
        "storage_dtype": "float16",
        "recipe": recipe or {},
        "report": report or {},
    }
    # config.json last: a directory is a draft once its config.json is there, and neither file is
    # ever half-written (each goes to a temporary name first; on any error the temporary is removed)
    tmp = directory / "model.safetensors.tmp"
    try:
        save_file(state, str(tmp))
        os.chmod(tmp, 0o644)  # shipped in the repository: readable like any other file
        os.replace(tmp, directory / "model.safetensors")
    finally:
        if tmp.exists():
            tmp.unlink()
    from ..outputs import replace_file

    replace_file(directory / "config.json", (json.dumps(config, indent=1, sort_keys=False) + "\n").encode())
    return directory


def read_draft_config(directory: str | os.PathLike) -> dict:
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise DraftLoadError(f"{directory} is not a draft directory: it has no config.json (made by `adaspec train-draft`)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DraftLoadError(f"{directory}/config.json cannot be read as JSON ({e}); pass a draft directory made "
                             "by `adaspec train-draft`", param="--draft_model") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        got = config.get("format") if isinstance(config, dict) else type(config).__name__
        raise DraftLoadError(f"{directory}/config.json is not an adaspec draft (format {got!r})", param="--draft_model")
    version = config.get("format_version", 0)
    if isinstance(version, bool) or not isinstance(version, int):
        raise DraftLoadError(f"{directory}/config.json: format_version must be an integer, got {version!r}",
                             param="--draft_model")
    if version > FORMAT_VERSION:
        raise DraftLoadError(f"{directory} was written by a newer adaspec (draft format {config['format_version']})")
    return config


def check_target(config: dict, cfg: ModelConfig, fingerprint: str | None, where: str) -> None:
    """Refuse a draft made for another target, naming what differs."""
    made_for = config.get("target", {})
    mine = target_info(cfg, fingerprint)
    for key in ("vocab_size", "hidden_size", "num_layers", "num_kv_heads", "head_dim"):
        if made_for.get(key) != mine[key]:
            raise DraftLoadError(
                f"the draft at {where} was made for another target model: {key} {made_for.get(key)} != "
                f"{mine[key]} of this target; pass a --draft_model trained for this --model "
                "(`adaspec train-draft --model=... --output=DIR`)"
            )
    theirs = made_for.get("fingerprint")
    if fingerprint and theirs and theirs != fingerprint:
        raise DraftLoadError(
            f"the draft at {where} was made for other target weights (fingerprint {theirs}, this target is "
            f"{fingerprint}); pass a --draft_model trained for this --model (`adaspec train-draft`)"
        )


def load_drafter(
    path: str | os.PathLike | None,
    kind: str,
    target_model,
    target_config: ModelConfig | str | os.PathLike,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    target_fingerprint: str | None = None,
) -> Drafter:
    """The draft at `path` (None: the shipped draft of `kind`), bound to `target_model`, ready to allocate.

    `target_config` is the target's ModelConfig, or its model directory: then the config is the
    model's own and the weights fingerprint is read from the directory, so a draft made for other
    weights is refused."""
    from safetensors.torch import load_file

    if isinstance(target_config, (str, os.PathLike)):
        if target_fingerprint is None:
            from ..models.loader import weights_fingerprint

            target_fingerprint = weights_fingerprint(target_config)
        target_config = target_model.config

    kind = kind.lower()
    if kind not in KINDS:
        raise DraftLoadError(f"unknown draft kind {kind!r}: expected one of {', '.join(KINDS)}")
    if path is None:
        directory = shipped_draft_dir(kind)
        if not (directory / "config.json").is_file():
            raise DraftLoadError(
                f"no {kind.upper()} draft ships with adaspec for this model ({directory} is missing): pass "
                f"--draft_model=DIR, or train one with `adaspec train-draft --kind={kind} --output=DIR`"
            )
    else:
        directory = Path(path).expanduser()
        if not directory.is_dir():
            raise DraftLoadError(f"--draft_model={path}: no such directory (train one with `adaspec train-draft`)")
    config = read_draft_config(directory)
    if config.get("kind") != kind:
        raise DraftLoadError(
            f"the draft at {directory} is a {config.get('kind')!r} draft, but {kind!r} was asked for "
            "(--speculative_algorithm and --draft_model must agree)"
        )
    check_target(config, target_config, target_fingerprint, str(directory))
    state = load_file(str(directory / "model.safetensors"))
    d2t = state["vocab.d2t"]
    arch = {k: config[k] for k in ("width", "num_layers", "rank", "max_steps", "direct_input") if k in config}
    if "capture_layers" in config:
        arch["capture_layers"] = tuple(config["capture_layers"])
    draft = build_draft(kind, target_config, d2t, **arch)
    missing, unexpected = draft.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise DraftLoadError(f"{directory}/model.safetensors does not fit its config: missing {missing[:5]}, unexpected {unexpected[:5]}")
    draft = draft.to(device=device, dtype=dtype)
    draft.vocab.d2t = draft.vocab.d2t.long()
    draft.requires_grad_(False).eval()
    draft.source_dir = str(directory)
    draft.draft_config = config
    # identifies these draft weights in cost tables (R-G3): a table measured with another draft is refused
    draft.fingerprint = "sha256:" + hashlib.sha256((directory / "model.safetensors").read_bytes()).hexdigest()[:32]
    return draft.bind_target(target_model)


def engine_drafter(config, draft_dir, target_model, model_dir, device, dtype) -> Drafter:
    """The drafter `--speculative_algorithm` asks for: a saved draft (MTP, DSpark), the model-free
    Suffix draft, or MTP+Suffix (the MTP draft at `draft_dir` plus a Suffix draft), issue 10."""
    from .hybrid import MTPSuffixDrafter
    from .suffix import SuffixDrafter

    kind = config.speculative_algorithm.lower()
    lag = 2 if config.enable_schedule_overlap else 1
    if kind == "suffix":
        return SuffixDrafter(global_cache=config.suffix_global_cache, lag=lag)
    if kind == "mtp+suffix":
        mtp = load_drafter(draft_dir, "mtp", target_model, model_dir, device, dtype)
        return MTPSuffixDrafter(mtp, SuffixDrafter(global_cache=config.suffix_global_cache, lag=lag), lag=lag,
                                mtp_full_width=config.enable_adaptive_target_verify)
    return load_drafter(draft_dir, kind, target_model, model_dir, device, dtype)


def ready_drafter(drafter, config, linear_backend: str, cache_len: int, layer_kernels: str = "torch"):
    """The engine's drafter made ready to serve: an `nn.Module` draft (and MTP+Suffix's MTP part) gets
    the target's linear backend in place (models/linear.pack_module: inference only) and, where its
    block is a models/llama DecoderLayer (MTP), the target's --layer_kernels; the schedule lag is set,
    and per-slot state is allocated. ConfigError when --num_speculative_tokens exceeds what the draft
    proposes."""
    from ..config import ConfigError
    from ..models.linear import pack_module
    from ..models.native_gemm import attach_for

    packable = getattr(drafter, "mtp", drafter)  # MTP+Suffix: its MTP part (issue 10)
    if isinstance(packable, torch.nn.Module):  # the drafts and their heads use the target's backend
        pack_module(packable, linear_backend)
        attach_for(packable, linear_backend, layer_kernels)  # and, as the target, its kernel for fp16w at verify sizes
    if hasattr(packable, "native_kernels"):
        packable.native_kernels = layer_kernels == "native"
    if hasattr(drafter, "set_lag"):
        drafter.set_lag(2 if config.enable_schedule_overlap else 1)
    if config.num_draft_tokens > drafter.max_steps:
        raise ConfigError(f"--num_speculative_tokens={config.num_draft_tokens} exceeds what the draft "
                          f"proposes ({drafter.max_steps})")
    drafter.allocate(config.max_seqs_per_batch, cache_len)
    return drafter
