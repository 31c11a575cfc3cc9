"""Model-directory, tokenizer, draft and memory checks that need no weights (issue 8, R-A1, R-B6).

They read config.json, the safetensors *headers* (names, shapes, byte ranges: a truncated file is
found here), the tokenizer files and a draft's config.json; the weights themselves are read only by
the engine afterwards. Every refusal names the flag (`--model`, `--draft_model`, ...) and the fix.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ..errors import UserError
from ..models.config import InvalidModelError, ModelConfig
from ..models.files import safetensors_files

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def safetensors_header(path: Path, model_dir) -> dict:
    """The JSON header of a safetensors file, checked against the file's size."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError("shorter than a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8 or n > 100 * 2**20:
                raise ValueError("its header length does not fit the file")
            header = json.loads(f.read(n))
    except (OSError, ValueError) as e:
        raise InvalidModelError(f"--model={model_dir}: weights file {path.name} is damaged or not a safetensors file "
                                f"({e}); re-download or re-export it", param="--model") from None
    if not isinstance(header, dict):
        raise InvalidModelError(f"--model={model_dir}: weights file {path.name} has no tensor table", param="--model")
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)
               and isinstance(v.get("data_offsets"), list) and len(v["data_offsets"]) == 2), default=0)
    if 8 + n + end > size:
        raise InvalidModelError(f"--model={model_dir}: weights file {path.name} is truncated ({size} bytes, its "
                                f"tensors need {8 + n + end}); re-download or re-export it", param="--model")
    return header


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]] | None:
    """Tensor name -> shape of the engine's model for `cfg` (built on the meta device: no memory)."""
    try:
        import torch

        from ..models.llama import LlamaForCausalLM

        model = LlamaForCausalLM(cfg, dtype=torch.float32, device="meta")
        return {k: tuple(v.shape) for k, v in model.state_dict().items()}
    except Exception:  # noqa: BLE001 - a model that cannot be built on meta is checked at load instead
        return None


def check_weights(model_dir: Path, cfg: ModelConfig) -> int:
    """Every tensor the forward needs is present with the shape config.json implies; returns the bytes."""
    files = safetensors_files(model_dir)
    found: dict[str, tuple[int, ...]] = {}
    total = 0
    for file in files:
        for name, info in safetensors_header(file, model_dir).items():
            if name != "__metadata__" and isinstance(info, dict):
                found[name] = tuple(info.get("shape", ()))
        total += file.stat().st_size
    want = expected_shapes(cfg)
    if want is None:
        return total
    if cfg.tie_word_embeddings:
        want.pop("lm_head.weight", None)
        found.pop("lm_head.weight", None)
    missing = sorted(set(want) - set(found))
    if missing:
        raise InvalidModelError(f"--model={model_dir}: the weights lack {len(missing)} tensors config.json needs, "
                                f"e.g. {missing[:3]}; the checkpoint does not match its config.json", param="--model")
    wrong = [(k, found[k], want[k]) for k in sorted(want) if found[k] != want[k]]
    if wrong:
        k, got, exp = wrong[0]
        raise InvalidModelError(f"--model={model_dir}: tensor {k} has shape {list(got)} but config.json implies "
                                f"{list(exp)} ({len(wrong)} tensors differ); the checkpoint does not match its "
                                "config.json", param="--model")
    return total


def load_tokenizer(model_dir: Path, cfg: ModelConfig):
    """The model's tokenizer, loaded now (cheap) so prompts and chat templates are checked before the weights."""
    from ..models.tokenizer import Tokenizer

    if not any((model_dir / f).is_file() for f in TOKENIZER_FILES):
        raise InvalidModelError(f"--model={model_dir} has no tokenizer files ({', '.join(TOKENIZER_FILES)}); copy the "
                                "tokenizer of the model into the directory", param="--model")
    try:
        tok = Tokenizer(model_dir)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - transformers raises many types for a broken tokenizer directory
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):  # name the culprit
            f = model_dir / name
            if f.is_file():
                try:
                    json.loads(f.read_text(encoding="utf-8"))
                except (ValueError, OSError) as bad:
                    raise InvalidModelError(f"--model={model_dir}: {name} is not valid JSON ({bad}); repair or "
                                            "re-export the tokenizer", param="--model") from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InvalidModelError(f"--model={model_dir}: its tokenizer cannot be loaded ({type(e).__name__}: {first})",
                                param="--model") from None
    if tok.vocab_size > cfg.vocab_size:
        raise InvalidModelError(f"--model={model_dir}: the tokenizer has {tok.vocab_size} tokens but the model's "
                                f"vocab_size is {cfg.vocab_size}: ids past {cfg.vocab_size - 1} have no embedding; the "
                                "tokenizer does not belong to these weights", param="--model")
    return tok


def check_draft(path: str | None, kind: str, width: int, cfg: ModelConfig, target_fingerprint: str | None) -> Path:
    """The draft directory (given or shipped) exists, is a `kind` draft for this target and drafts `width`."""
    from ..drafts.factory import DraftLoadError, check_target, read_draft_config, shipped_draft_dir

    if path is None:
        directory = shipped_draft_dir(kind)
        if not (directory / "config.json").is_file():
            raise DraftLoadError(f"no {kind.upper()} draft ships with adaspec ({directory} is missing): pass "
                                 f"--draft_model=DIR, or train one with `adaspec train-draft --kind={kind}`",
                                 param="--draft_model")
    else:
        directory = Path(path).expanduser()
        if not directory.exists():
            raise DraftLoadError(f"--draft_model={path}: no such directory (train one with `adaspec train-draft`)",
                                 param="--draft_model")
        if not directory.is_dir():
            raise DraftLoadError(f"--draft_model={path} is a file, not a draft directory (config.json + "
                                 "model.safetensors, made by `adaspec train-draft`)", param="--draft_model")
    where = f"--draft_model={path}" if path else f"the shipped {kind.upper()} draft"
    try:
        config = read_draft_config(directory)
    except DraftLoadError as e:
        if _is_model_directory(directory):
            raise DraftLoadError(f"{where} is a model directory (a target: its config.json has model_type / "
                                 "architectures), not a draft; pass a draft made by `adaspec train-draft` for the "
                                 "--model, or leave --draft_model out for the shipped one", param="--draft_model") from None
        raise DraftLoadError(f"{where}: {e}", param="--draft_model") from None
    if config.get("kind") != kind:
        raise DraftLoadError(f"{where} is a {config.get('kind')!r} draft, but --speculative_algorithm asks for "
                             f"{kind!r}; pass a {kind} draft or change --speculative_algorithm", param="--draft_model")
    if not (directory / "model.safetensors").is_file():
        raise DraftLoadError(f"{where}: {directory}/model.safetensors is missing", param="--draft_model")
    if path is None and target_fingerprint and config.get("target", {}).get("fingerprint") != target_fingerprint:
        raise DraftLoadError(f"the shipped {kind.upper()} draft was made for the bundled model, not for this --model; "
                             f"pass --draft_model=DIR trained for it (`adaspec train-draft --kind={kind} --model=...`)",
                             param="--draft_model")
    try:
        check_target(config, cfg, target_fingerprint, str(directory))
    except DraftLoadError as e:
        raise DraftLoadError(str(e), param="--draft_model") from None
    steps = config.get("max_steps") or config.get("width")
    if isinstance(steps, int) and width > steps:
        raise DraftLoadError(f"--num_speculative_tokens={width} exceeds what {where} proposes ({steps}); use at most "
                             f"{steps}", param="--num_speculative_tokens")
    return directory


def _is_model_directory(directory: Path) -> bool:
    try:
        cfg = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and "format" not in cfg and ("model_type" in cfg or "architectures" in cfg)


def draft_fingerprint(directory: Path) -> str:
    """Identity of a draft's weights in cost tables (as drafts.factory.load_drafter computes it)."""
    import hashlib

    return "sha256:" + hashlib.sha256((directory / "model.safetensors").read_bytes()).hexdigest()[:32]


def available_memory(device) -> int | None:
    """Bytes the engine can still allocate on `device` (MemAvailable on CPU, free memory on CUDA)."""
    if device.type == "cuda":
        import torch

        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:  # noqa: BLE001
            return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


RANK_PROCESS_BYTES = 256 << 20  # a spawned rank before its weights: interpreter, torch, adaspec (~230 MiB measured)


def check_memory(cfg: ModelConfig, slots: int, cache_len: int, dtype, device, weight_bytes: int, *,
                 shards: float = 1.0, ranks: int = 1, ranks_flag: str = "--dp_size") -> None:
    """Refuse a KV cache + weights that cannot fit: torch would fail while allocating, after loading.
    `shards`: copies of weights + KV this node holds (CPU data parallel: --dp_size / --nnodes); `ranks`:
    processes on this node (each spawned one costs RANK_PROCESS_BYTES before its weights), set by `ranks_flag`."""
    import torch

    elt = torch.empty((), dtype=dtype).element_size()
    kv = 2 * cfg.num_layers * slots * cache_len * cfg.num_kv_heads * cfg.head_dim * elt
    weights = weight_bytes * max(1.0, elt / 2)  # checkpoints are mostly 16-bit; fp32 doubles them
    need, have = (kv + weights) * shards + (ranks - 1) * RANK_PROCESS_BYTES, available_memory(device)
    gib = 2**30
    if have is not None and need > have and ranks > 1:  # --dp_size=99999 spawned processes until the OOM killer came
        raise UserError(
            f"{ranks_flag} starts {ranks} processes on this node, which need ~{need / gib:.1f} GiB (weights, KV caches "
            f"and ~{RANK_PROCESS_BYTES / gib:.2f} GiB per process), but only {have / gib:.1f} GiB is available; lower "
            f"{ranks_flag} (or --max_seqs_per_batch / --max_model_len)", param=ranks_flag)
    if have is not None and need > have:
        raise UserError(
            f"--max_seqs_per_batch={slots} x context {cache_len} tokens needs a {kv / gib:.1f} GiB KV cache plus "
            f"~{weights / gib:.1f} GiB of weights, but only {have / gib:.1f} GiB is available on {device}; lower "
            "--max_seqs_per_batch or --max_model_len (or use a smaller --dtype)", param="--max_seqs_per_batch")


def resolve_layer_kernels(config, device, dtype, model_cfg) -> tuple[str, str]:
    """--layer_kernels resolved for this model and machine: (native | torch, why). The native kernels
    are built here (once per machine, a couple of seconds) so that `native` is refused before the
    weights load when they cannot run (no compiler, another dtype or device, a head size that is not a
    multiple of 16)."""
    from ..config import ConfigError
    from ..models.native_kernels import resolve

    try:
        return resolve(config.layer_kernels, device, dtype, model_cfg)
    except ValueError as e:
        raise ConfigError(str(e), param="--layer_kernels") from None
