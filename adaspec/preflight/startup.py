"""`preflight()`: every start-up check that needs no weights, in one plain function (issue 8).

Called by `generate`, `calibrate`, `serve`, and by `LLMEngine` itself (so the Python API gets the
same checks), before any model work. Order: the flags alone (types, ranges, switch rules, the
device, cross-flag rules with the start-up sampling parameters), then every file the flags name
(model path, draft, calibration JSON, saved cost table as far as it is knowable without the model,
output paths writable and free), then what config.json and the tokenizer decide (context limit,
memory, the draft's target, the calibration resolved against the prepared geometry, the table's
weights fingerprint and KV ranges). Only a GGUF's first conversion does real work here, and only
after everything before it passed. The result carries what was resolved, so nothing is read twice.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..config import NATIVE_LINEAR_BACKEND, ConfigError, EngineConfig, check_layer_kernels, check_linear_backend
from ..errors import RequestError, UserError
from ..sampling_params import SamplingParams
from .paths import read_json, same_file


@dataclass(frozen=True)
class Checked:
    """What preflight resolved; `LLMEngine(config, checked=...)` starts from it."""

    config: EngineConfig
    device: Any  # torch.device
    dtype: Any  # torch.dtype
    model_dir: Path
    model_config: Any  # ModelConfig
    tokenizer: Any  # models.tokenizer.Tokenizer
    max_model_len: int
    cache_len: int
    draft_dir: Path | None = None
    weights_fingerprint: str | None = None  # target + draft, for cost tables (adaptive only)
    quantization: str | None = None
    effective: Any = None  # EffectiveCalibration that will run (adaptive, no saved table)
    warnings: tuple[str, ...] = ()


def resolve_dtype(name: str, device) -> Any:
    import torch

    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16
        flags = ""
        try:
            with open("/proc/cpuinfo") as f:
                flags = f.read()
        except OSError:
            pass
        return torch.bfloat16 if ("avx512_bf16" in flags or "amx_bf16" in flags) else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def check_device(config: EngineConfig):
    import torch

    device = torch.device(config.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"--device={config.device} but no CUDA device is available; use --device=cpu",
                              param="--device")
        n = torch.cuda.device_count()
        if device.index is not None and device.index >= n:
            raise ConfigError(f"--device={config.device}: this machine has {n} CUDA device(s) (cuda:0..cuda:{n - 1})",
                              param="--device")
    return device


def check_sampling(config: EngineConfig, sampling: Iterable[SamplingParams], names: Mapping[str, str] | None = None):
    """Start-up-knowable request rules (R-B5, R-E3) for the parameters every request will have."""
    names = dict(names or {})
    for p in sampling:
        reason = p.unsupported_reason(speculative=config.speculative)
        if reason:
            raise RequestError(reason, param=names.get(reason.split()[0], reason.split()[0]))
        if config.enable_unified_mtp_graph and p.temperature > 0:
            flag = names.get("temperature", "temperature")
            raise ConfigError(f"{flag}={p.temperature} is not supported with --enable_unified_mtp_graph=true, which "
                              f"serves temperature 0 only (R-E3); use {flag}=0 or --enable_unified_mtp_graph=false",
                              param=flag)


def no_effect_warnings(config: EngineConfig, sampling: Iterable[SamplingParams] = ()) -> list[str]:
    """One line per flag that is accepted but changes nothing in this configuration (README lists them)."""
    out = []
    if not config.adaptive:
        why = ("has no effect without --enable_adaptive_draft_step or --enable_adaptive_target_verify: "
               "prepared shapes are used only by the adaptive modes")
        if config.graph_decode_batch_sizes is not None:
            out.append(f"--graph_decode_batch_sizes {why}")
        if not config.enable_graph:
            out.append(f"--enable_graph=false {why}")
        if config.disable_graph_warmup:
            out.append(f"--disable_graph_warmup=true {why}")
    rendezvous = [f for f, given in (("--master_node_addr", config.master_node_addr != "127.0.0.1"),
                                     ("--master_port", config.master_port != 0)) if given]
    if rendezvous and config.tp_size * config.dp_size == 1:
        out.append(f"{', '.join(rendezvous)} {'has' if len(rendezvous) == 1 else 'have'} no effect with --tp_size=1 "
                   "--dp_size=1: one process needs no rendezvous")
    cores = os.cpu_count() or 1
    if config.threads > cores:
        out.append(f"--threads={config.threads} is more than this machine's {cores} CPU cores; PyTorch will "
                   f"oversubscribe them (use at most --threads={cores})")
    params = list(sampling)
    if params and all(p.is_greedy for p in params) and config.seed != 0:
        out.append(f"--seed={config.seed} has no effect: every request is greedy (temperature 0)")
    return out


def _check_outputs(config: EngineConfig, outputs: Mapping[str, str | None]) -> None:
    from ..calibration.cost_table import OUTPUT_FLAG, CostTableError
    from ..outputs import check_new_file

    named = {OUTPUT_FLAG: config.adaptive_target_verify_cost_table_output, **outputs}
    seen: dict[Path, str] = {}
    for flag, path in named.items():
        if not path:
            continue
        error = CostTableError if flag == OUTPUT_FLAG else UserError
        p = check_new_file(path, flag, "cost table" if flag == OUTPUT_FLAG else "file", error)
        key = p.resolve()
        if key in seen:
            raise UserError(f"{flag}={path} is the same file as {seen[key]}; give each output its own name", param=flag)
        seen[key] = f"{flag}={path}"
        for inp in ("adaptive_target_verify_calibration", "adaptive_draft_step_config"):
            other = getattr(config, inp, None)
            if other and same_file(other, path):
                raise UserError(f"{flag}={path} would overwrite the input --{inp}", param=flag)


def preflight(config: EngineConfig, *, sampling: Iterable[SamplingParams] = (), drafter=None,
              outputs: Mapping[str, str | None] | None = None, sampling_names: Mapping[str, str] | None = None,
              progress: bool = True, run_slots: int | None = None) -> Checked:
    """Check everything knowable before the weights load; raise a `UserError` naming the flag.

    `sampling`: the parameters every request will have, when known at start-up (the CLI's);
    `drafter`: a Drafter object used instead of a draft directory; `outputs`: further output files
    ({flag: path}) that must be writable and absent; `sampling_names`: how the caller names the
    sampling fields in messages (`{"temperature": "--temperature"}`); `run_slots`: fewer request
    slots than --max_seqs_per_batch that this run will use (`adaspec generate` with fewer prompts):
    the flags are checked as given, then the engine is built with `run_slots` slots."""
    from ..calibration.config import (load_draft_step_config, load_verify_calibration, resolve_draft_step_config,
                                      resolve_verify_calibration)
    from ..models.loader import bundled_gguf_path, check_model_path

    config = config.validate()
    if drafter is not None:
        _check_drafter(config, drafter)
    sampling = list(sampling)
    check_sampling(config, sampling, sampling_names)
    # ---- every file the flags name, before the model is touched (and before torch is imported)
    if config.model is not None:
        check_model_path(config.model)
    else:
        bundled_gguf_path()
    if config.draft_model is not None and drafter is None:
        from ..drafts.factory import DraftLoadError

        if not Path(config.draft_model).expanduser().is_dir():
            what = "is a file, not a draft directory" if Path(config.draft_model).is_file() else "does not exist"
            raise DraftLoadError(f"--draft_model={config.draft_model} {what} (make one with `adaspec train-draft`)",
                                 param="--draft_model")
    verify_cfg = step_cfg = None
    if config.enable_adaptive_target_verify and config.adaptive_target_verify_calibration:
        verify_cfg = load_verify_calibration(config.adaptive_target_verify_calibration)
    if config.enable_adaptive_draft_step and config.adaptive_draft_step_config:
        step_cfg = load_draft_step_config(config.adaptive_draft_step_config)
    _check_outputs(config, outputs or {})
    device = check_device(config)
    dtype = resolve_dtype(config.dtype, device)
    check_linear_backend(config.linear_backend, str(dtype).removeprefix("torch."), device.type)  # --dtype=auto resolved
    check_layer_kernels(config.layer_kernels, str(dtype).removeprefix("torch."), device.type)
    table_path = config.adaptive_target_verify_cost_table
    if table_path:
        _early_table_check(config, table_path, dtype, device)
    # ---- what config.json and the tokenizer decide
    model_dir, model_cfg, tokenizer, weight_bytes = _model(config, progress)
    limit = model_cfg.max_position_embeddings
    if config.max_model_len is not None and config.max_model_len > limit:
        raise ConfigError(f"--max_model_len={config.max_model_len} exceeds the model's context limit {limit}; use at "
                          f"most {limit}", param="--max_model_len")
    max_model_len = config.max_model_len or min(limit, 2048)
    width = config.num_draft_tokens
    cache_len = max_model_len + width + 1
    from .model import check_draft, check_memory, draft_fingerprint, resolve_layer_kernels

    ranks = config.tp_size * config.dp_size // config.nnodes if device.type == "cpu" else 1  # CUDA: one per GPU
    check_memory(model_cfg, config.max_seqs_per_batch, cache_len, dtype, device, weight_bytes,
                 shards=config.dp_size / config.nnodes if device.type == "cpu" else 1.0, ranks=ranks,
                 ranks_flag="--dp_size" if config.dp_size > 1 else "--tp_size")
    kernels = resolve_layer_kernels(config, device, dtype, model_cfg)[0]  # refuses native where it cannot run
    if run_slots is not None and run_slots < config.max_seqs_per_batch:  # flags checked as given, run with fewer
        config = dataclasses.replace(config, max_seqs_per_batch=run_slots).validate()
    draft_dir = fingerprint = quant = effective = None
    if config.speculative:
        from ..models.loader import quantization, weights_fingerprint

        target_fp = weights_fingerprint(model_dir)
        draft_kind = {"MTP+Suffix": "mtp", "Suffix": None}.get(config.speculative_algorithm,
                                                              config.speculative_algorithm.lower())
        if drafter is None and draft_kind is not None:  # Suffix has no draft file (issue 10)
            draft_dir = check_draft(config.draft_model, draft_kind, width, model_cfg, target_fp)
        elif width > getattr(drafter, "max_steps", width):
            raise ConfigError(f"--num_speculative_tokens={width} exceeds what the draft proposes ({drafter.max_steps})",
                              param="--num_speculative_tokens")
        if config.adaptive:
            draft_fp = (getattr(drafter, "fingerprint", None) or type(drafter).__name__) if drafter is not None \
                else model_free_fingerprint(config.speculative_algorithm, draft_dir and draft_fingerprint(draft_dir))
            fingerprint, quant = f"{target_fp}+draft:{draft_fp}", quantization(model_dir)
            facts = _facts(config, max_model_len, cache_len)
            if table_path:
                _full_table_check(config, table_path, dtype, device, fingerprint, quant, max_model_len, kernels)
            elif config.enable_adaptive_draft_step:
                path = config.adaptive_draft_step_config
                effective = resolve_draft_step_config(step_cfg, facts, source=f"--adaptive_draft_step_config={path}"
                                                      if path else None)
            else:
                path = config.adaptive_target_verify_calibration
                effective = resolve_verify_calibration(verify_cfg, facts, source=f"--adaptive_target_verify_calibration="
                                                       f"{path}" if path else None)
    return Checked(config, device, dtype, model_dir, model_cfg, tokenizer, max_model_len, cache_len, draft_dir,
                   fingerprint, quant, effective, tuple(no_effect_warnings(config, sampling)))


def _check_drafter(config: EngineConfig, drafter) -> None:
    """A drafter object (Python API) is used only under speculation, instead of a draft directory."""
    missing = [n for n in ("draft", "allocate", "max_steps") if not hasattr(drafter, n)]
    if missing:
        raise ConfigError(f"drafter: a {type(drafter).__name__} is not a drafter (it lacks {', '.join(missing)}; see "
                          "adaspec.drafts.base.Drafter)", param="drafter")
    if not config.speculative:
        raise ConfigError("drafter is given but speculative_algorithm is 'none', so it would never run; pass "
                          "speculative_algorithm='MTP' or 'DSpark', or drop drafter", param="drafter")
    if config.draft_model is not None:
        raise ConfigError(f"drafter and draft_model={config.draft_model!r} are both given; pass only one",
                          param="drafter")


def model_free_fingerprint(algorithm: str, draft_fp: str | None) -> str:
    """The draft part of a cost table's weights fingerprint, as the engine's drafter reports it (R-G3)."""
    from ..drafts.suffix import FINGERPRINT

    if algorithm == "Suffix":
        return FINGERPRINT
    return f"{draft_fp}+{FINGERPRINT}" if algorithm == "MTP+Suffix" else draft_fp


def _model(config: EngineConfig, progress: bool):
    from ..models.config import InvalidModelError
    from ..models.loader import read_model_config, resolve_model
    from .model import check_weights, load_tokenizer

    try:
        model_dir = resolve_model(config.model, progress=progress)
    except UserError:
        raise
    except (ValueError, KeyError, IndexError, EOFError) as e:  # a GGUF that starts right but does not convert
        raise InvalidModelError(f"--model={config.model}: the GGUF file cannot be converted ({type(e).__name__}: {e})",
                                param="--model") from None
    model_cfg = read_model_config(model_dir)
    weight_bytes = check_weights(model_dir, model_cfg)
    return model_dir, model_cfg, load_tokenizer(model_dir, model_cfg), weight_bytes


def _facts(config: EngineConfig, max_model_len: int, cache_len: int):
    """The prepared geometry exactly as engine/control.py builds it (R-F5, R-F6)."""
    from ..calibration.config import EngineFacts
    from ..geometry import choose_prepared

    geometry, _ = choose_prepared(config.max_seqs_per_batch, config.num_draft_tokens, config.device.split(":")[0],
                                  config.graph_decode_batch_sizes, unified=config.enable_unified_mtp_graph,
                                  max_rows=config.max_num_batched_tokens, step_mode=config.enable_adaptive_draft_step)
    return EngineFacts.from_geometry(geometry, model_context_limit=max_model_len, kv_capacity_per_slot=cache_len,
                                     dp_size=config.dp_size)


def expected_linear_backend(config: EngineConfig, dtype, device, table_value: str) -> str:
    """The linear backend the engine will run, as far as it is known before the weights load: the
    dtype's own off CPU float32, the flag's value if explicit; `auto` is measured at load, so the
    table's own value passes here and the engine checks the measured one (engine/control.py)."""
    dt = str(dtype).removeprefix("torch.")
    if device.type != "cpu" or dt != "float32":
        return NATIVE_LINEAR_BACKEND.get(dt, dt)
    return table_value if config.linear_backend == "auto" else config.linear_backend


def expected_layer_kernels(config: EngineConfig, table_value: str) -> str:
    """Before the model's config is read, `auto` is unresolved: the table's own value passes the early
    check, and the full check compares the resolved one."""
    return table_value if config.layer_kernels == "auto" else config.layer_kernels


def compat_for(config: EngineConfig, dtype, device, weights_fingerprint: str, quantization: str,
               linear_backend: str = "fp32", layer_kernels: str = "torch"):
    from ..calibration.cost_table import TableCompat

    return TableCompat(
        algorithm=config.speculative_algorithm, draft_width=config.num_draft_tokens,
        weights_fingerprint=weights_fingerprint, dtype=str(dtype).removeprefix("torch."), device_type=device.type,
        quantization=quantization, linear_backend=linear_backend, layer_kernels=layer_kernels,
        tp_size=config.tp_size, dp_size=config.dp_size,
        cp_size=config.cp_size,
        unified=config.enable_unified_mtp_graph,
        mode="adaptive_draft_step" if config.enable_adaptive_draft_step else "adaptive_target_verify")


def _early_table_check(config: EngineConfig, path: str, dtype, device) -> None:
    """The saved table parses, is sane, and matches every compatibility field known without the model."""
    from ..calibration.cost_table import TABLE_FLAG, CostTable

    if not Path(path).expanduser().is_file():
        CostTable.load(path, compat_for(config, dtype, device, "", "none"))  # says what to pass instead
    data = read_json(path, TABLE_FLAG, "cost table")
    meta = CostTable.from_dict(data, str(path), sanity=False).metadata
    CostTable.load(path, compat_for(config, dtype, device, meta.weights_fingerprint, meta.quantization,
                                    expected_linear_backend(config, dtype, device, meta.linear_backend),
                                    expected_layer_kernels(config, meta.layer_kernels)))


def _full_table_check(config, path, dtype, device, fingerprint, quant, max_model_len, kernels: str) -> None:
    from ..calibration.cost_table import TABLE_FLAG, CostTable, CostTableError

    meta = CostTable.from_dict(read_json(path, TABLE_FLAG, "cost table"), str(path), sanity=False).metadata
    table = CostTable.load(path, compat_for(config, dtype, device, fingerprint, quant,
                                            expected_linear_backend(config, dtype, device, meta.linear_backend),
                                            kernels))
    problem = table.context_problem(max_model_len)
    if problem:
        raise CostTableError(f"{TABLE_FLAG}={path}: {problem}. Fix: load a table calibrated for this context, or "
                             "recalibrate", param=TABLE_FLAG)
