"""The files of a model directory: what `--model` names, config.json, the weight files (R-A1).

Every problem is a `UserError` naming `--model`, the file and the fix: a missing path, a file that
is not a GGUF, a directory without config.json, JSON that does not parse, a config without the
fields the forward needs, a pre-quantised checkpoint, missing shards. Nothing here reads weights.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import UserError

GGUF_MAGIC = b"GGUF"


class ModelNotFoundError(UserError, FileNotFoundError):
    """`--model` names nothing adaspec can load; the message says what to do."""

    def __init__(self, message: str = "", *, param: str | None = "--model"):
        super().__init__(message, param=param)


def check_model_path(model: str | os.PathLike) -> None:
    """What `--model` names exists and has the right kind (cheap: nothing is read but a GGUF's magic)."""
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelNotFoundError(f"--model={model} does not exist (no such file or directory); pass a Hugging Face model "
                                 "directory or a .gguf file (or leave --model out for the bundled model)")
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelNotFoundError(
                f"--model={model} is a file but not a .gguf: pass a GGUF file or a Hugging Face model directory "
                "(config.json + *.safetensors + tokenizer files)"
            )
        try:
            with open(path, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise ModelNotFoundError(f"--model={model}: cannot read the file ({e.strerror})") from None
        if magic != GGUF_MAGIC:
            raise ModelNotFoundError(f"--model={model} is named .gguf but is not a GGUF file (it does not start "
                                     "with the GGUF magic bytes); pass a real GGUF file or a model directory")
        return
    if not path.is_dir():
        raise ModelNotFoundError(f"--model={model} is neither a file nor a directory")
    if not (path / "config.json").is_file():
        what = "is empty: no config.json" if not any(path.iterdir()) else "has no config.json"
        raise ModelNotFoundError(
            f"--model={model} is not a model directory: it {what} (expected a Hugging Face style directory "
            "with config.json, *.safetensors and tokenizer files, or pass a .gguf file)"
        )


def read_json_file(path: Path, model_dir, what: str) -> object:
    from .config import InvalidModelError

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InvalidModelError(f"--model={model_dir}: {what} is not UTF-8 text", param="--model") from None
    except json.JSONDecodeError as e:
        raise InvalidModelError(f"--model={model_dir}: {what} is not valid JSON (line {e.lineno} column {e.colno}: "
                                f"{e.msg}); repair or re-export the model", param="--model") from None
    except OSError as e:
        raise InvalidModelError(f"--model={model_dir}: cannot read {what} ({e.strerror})", param="--model") from None


def read_config(model_dir: str | os.PathLike) -> dict:
    from .config import InvalidModelError

    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ModelNotFoundError(f"--model={model_dir} has no config.json")
    raw = read_json_file(path, model_dir, "config.json")
    if not isinstance(raw, dict):
        raise InvalidModelError(f"--model={model_dir}: config.json must hold a JSON object, got "
                                f"{type(raw).__name__}", param="--model")
    return raw


def safetensors_files(model_dir: str | os.PathLike) -> list[Path]:
    """The weight files: the index's shards when `model.safetensors.index.json` exists, else `*.safetensors`."""
    from .config import InvalidModelError

    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        data = read_json_file(index, model_dir, "model.safetensors.index.json")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise InvalidModelError(f"--model={model_dir}: model.safetensors.index.json has no \"weight_map\" object "
                                    "of tensor name -> shard file", param="--model")
        names = sorted(set(weight_map.values()))
        files = [model_dir / n for n in names]
        missing = [str(f.name) for f in files if not f.is_file()]
        if missing:
            raise ModelNotFoundError(
                f"--model={model_dir}: shards named by model.safetensors.index.json are missing: {missing}"
            )
        return files
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ModelNotFoundError(
            f"--model={model_dir} holds no *.safetensors weights (adaspec does not read .bin / .pth checkpoints)"
        )
    return files


def read_model_config(model_dir: str | os.PathLike):
    """The ModelConfig of a model directory, refusing what the engine cannot run (no weights read)."""
    from .config import ModelConfig, UnsupportedModelError

    raw = read_config(model_dir)
    if raw.get("format") == "adaspec-draft":
        raise UnsupportedModelError(f"--model={model_dir} is an adaspec draft, not a target model: pass it as "
                                    "--draft_model (with --speculative_algorithm) and the target as --model",
                                    param="--model")
    qc = raw.get("quantization_config")
    if qc:
        method = qc.get("quant_method", "?") if isinstance(qc, dict) else qc
        raise UnsupportedModelError(
            f"--model={model_dir} is a pre-quantised checkpoint ({method}); adaspec loads float16/bfloat16/float32 "
            "safetensors (or a .gguf file, which it dequantises)", param="--model")
    return ModelConfig.from_hf_dict(raw, source=str(model_dir))


