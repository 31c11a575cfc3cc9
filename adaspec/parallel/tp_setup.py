"""Tensor-parallel start-up: load and shard the target on every rank, agree, pack (issue 12).

`start_tp` runs in rank 0 (inside LLMEngine) and spawns the workers (`tp_worker_main`). Every rank
loads the full float32 (or --dtype) weights, keeps its shard (tensor_parallel.shard_model), and
reports; one failure is a refusal on all (launch.agree). The linear backend is chosen by rank 0
alone (with `auto`, measured on its shard) and broadcast, so every rank packs its shard with the
same kernel (issue 14: TP packs each rank's shard).
"""

from __future__ import annotations

import sys

import torch

from ..errors import UserError
from .launch import agree, broadcast, init_group, leave_group, rank_device, spawn_ranks
from .tensor_parallel import check_tp, shard_model


def load_shard(model_dir, dtype, device, linear_backend: str, verify_rows: int, rank: int, world: int,
               layer_kernels: str = "torch"):
    from ..models.linear import native_backend, pack_module
    from ..models.linear_select import check_rows, select_backend
    from ..models.loader import load_model
    from ..models.native_gemm import attach_for

    error, cfg, model = None, None, None
    try:
        cfg, model = load_model(model_dir, dtype, device, linear_backend=native_backend(dtype),
                                layer_kernels=layer_kernels)
        shard_model(model, rank, world)
    except (UserError, ValueError, OSError, RuntimeError) as e:
        error = str(e)
    agree(error)
    if rank == 0:
        choice, reuse = select_backend(linear_backend, model, verify_rows)
    backend = broadcast(choice.backend if rank == 0 else None)
    try:
        if rank != 0:
            choice, reuse = select_backend(backend, model, verify_rows)
        choice.kept_fp32 = pack_module(model, choice.backend, reuse)["kept_fp32"]
        model.native_gemm = attach_for(model, choice.backend, model.layer_kernels)  # before the row check
        if linear_backend != "fp32":
            check_rows(choice, model)
    except (UserError, ValueError, RuntimeError) as e:
        error = f"packing its shard with --linear_backend={backend}: {e}"
    agree(error)
    model.linear_backend, model.linear_choice = choice.backend, choice
    return cfg, model


def serve_as_worker(config, rank, world, model_dir, dtype, num_slots, cache_len, verify_rows) -> bool:
    """Load rank `rank`'s shard and run rank 0's messages until it stops (the group is joined);
    False when start-up was refused on some rank (agreed: rank 0 prints the message)."""
    from .tp_runner import worker_loop

    device = torch.device(rank_device(config, rank))
    try:
        _, model = load_shard(model_dir, dtype, device, config.linear_backend, verify_rows, rank, world,
                              config.layer_kernels)
    except UserError:
        leave_group()
        return False
    worker_loop(model, num_slots, cache_len, device)
    leave_group()
    return True


def tp_worker_main(rank, world, addr, port, config, *args) -> None:
    """A spawned rank (args: model_dir, dtype, num_slots, cache_len, verify_rows)."""
    from ..engine.llm_engine import configure_threads

    configure_threads(config.threads)
    init_group(rank, world, config.device, addr, port)
    serve_as_worker(config, rank, world, *args)


def start_tp(config, model_dir, dtype, device, num_slots: int, cache_len: int, verify_rows: int):
    """(launch, model config, rank 0's shard). Refusals before spawning name the flag. A process that
    is a worker itself (torchrun rank > 0, or the first process of node > 0) serves rank 0 and exits."""
    from ..models.loader import read_model_config

    check_tp(read_model_config(model_dir), config.tp_size)
    args = (str(model_dir), dtype, num_slots, cache_len, verify_rows)
    launch = spawn_ranks(config, tp_worker_main, args)
    if launch.rank != 0:
        ok = serve_as_worker(config, launch.rank, launch.world, *args)
        launch.join()
        sys.exit(0 if ok else 2)
    try:
        cfg, model = load_shard(model_dir, dtype, device, config.linear_backend, verify_rows, 0, launch.world,
                                config.layer_kernels)
    except UserError:
        launch.leave()
        raise
    return launch, cfg, model
