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
import torch.distributed as dist

from ..errors import UserError
from .launch import agree, init_group, rank_device, spawn_ranks
from .tensor_parallel import check_tp, shard_model


def load_shard(model_dir, dtype, device, linear_backend: str, verify_rows: int, rank: int, world: int):
    from ..models.linear import native_backend, pack_module
    from ..models.linear_select import check_rows, select_backend
    from ..models.loader import load_model

    error, cfg, model = None, None, None
    try:
        cfg, model = load_model(model_dir, dtype, device, linear_backend=native_backend(dtype))
        shard_model(model, rank, world)
    except (UserError, ValueError, OSError, RuntimeError) as e:
        error = str(e)
    agree(error)
    box = [None]
    if rank == 0:
        choice, reuse = select_backend(linear_backend, model, verify_rows)
        box = [choice.backend]
    dist.broadcast_object_list(box, src=0)
    try:
        if rank != 0:
            choice, reuse = select_backend(box[0], model, verify_rows)
        choice.kept_fp32 = pack_module(model, choice.backend, reuse)["kept_fp32"]
        if linear_backend != "fp32":
            check_rows(choice, model)
    except (UserError, ValueError, RuntimeError) as e:
        error = f"packing its shard with --linear_backend={box[0]}: {e}"
    agree(error)
    model.linear_backend, model.linear_choice = choice.backend, choice
    return cfg, model


def tp_worker_main(rank, world, addr, port, config, model_dir, dtype, num_slots, cache_len, verify_rows) -> None:
    from ..engine.llm_engine import configure_threads
    from .tp_runner import worker_loop

    configure_threads(config.threads)
    init_group(rank, world, config.device, addr, port)
    device = torch.device(rank_device(config, rank))
    try:
        _, model = load_shard(model_dir, dtype, device, config.linear_backend, verify_rows, rank, world)
    except UserError:  # agreed: rank 0 prints the message and exits 2
        dist.destroy_process_group()
        sys.exit(0)
    worker_loop(model, num_slots, cache_len, device)
    dist.destroy_process_group()


def start_tp(config, model_dir, dtype, device, num_slots: int, cache_len: int, verify_rows: int):
    """(launch, model config, rank 0's shard). Refusals before spawning name the flag."""
    from ..models.loader import read_model_config

    check_tp(read_model_config(model_dir), config.tp_size)
    launch = spawn_ranks(config, tp_worker_main, (str(model_dir), dtype, num_slots, cache_len, verify_rows))
    if launch.rank != 0:  # torchrun / another node: this process is a worker
        tp_worker_main_after_init(launch, config, model_dir, dtype, num_slots, cache_len, verify_rows)
    try:
        cfg, model = load_shard(model_dir, dtype, device, config.linear_backend, verify_rows, 0, launch.world)
    except UserError:
        launch.stopping = True  # the workers exit now: not a crash for the watchdog
        dist.destroy_process_group()
        launch.join()
        raise
    return launch, cfg, model


def tp_worker_main_after_init(launch, config, model_dir, dtype, num_slots, cache_len, verify_rows) -> None:
    """A process that is a worker itself (torchrun rank > 0, or the first process of node > 0):
    its group is joined; serve rank 0 until it stops, then exit this process."""
    from .tp_runner import worker_loop

    device = torch.device(rank_device(config, launch.rank))
    try:
        _, model = load_shard(model_dir, dtype, device, config.linear_backend, verify_rows, launch.rank, launch.world)
    except UserError:
        sys.exit(2)
    worker_loop(model, num_slots, cache_len, device)
    dist.destroy_process_group()
    launch.join()
    sys.exit(0)
