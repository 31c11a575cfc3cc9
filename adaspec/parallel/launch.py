"""Starting the ranks of a parallel engine on torch.distributed (issue 12, R-H3).

Single node (the default): the process the user started is rank 0; it spawns ranks 1..N-1 with
torch.multiprocessing (spawn) and rendezvouses with them over TCP on 127.0.0.1 (a free port unless
`--master_port`). Multi-node: every node runs the same command with its `--node_rank`; node 0's
first process is rank 0, each node spawns its own `world / nnodes` ranks, all meet at
`--master_node_addr:--master_port`. Under `torchrun` (RANK / WORLD_SIZE / MASTER_ADDR in the
environment) nothing is spawned: rank 0 runs the command, the other ranks become workers.

Backend: gloo on CPU, nccl on CUDA (by `--device`). Every collective has a timeout (`TIMEOUT_S`),
so a rank that dies ends the others with an error instead of a hang. Rank 0 validated the
configuration before anything started (issue 8); what only a worker can find out (its model
files, its memory) is agreed after loading: every rank reports, and one failure is a refusal on
all, with the failing rank's message printed once by rank 0.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

from ..errors import UserError

# The collective timeout is long: a worker waits in a broadcast for rank 0's next message, and an
# idle server sends none for as long as it is idle. Dead ranks are caught sooner: rank 0's watchdog
# ends it when a spawned rank exits, and a worker's collective fails as soon as rank 0's socket closes.
TIMEOUT_S = 7 * 24 * 3600


def backend_for(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def torchrun_env() -> tuple[int, int] | None:
    """(rank, world) when started by torchrun, else None."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return None


def is_worker_process(config) -> bool:
    """This process will be a worker, not rank 0: torchrun rank > 0, or a node other than node 0."""
    if config.tp_size * config.dp_size == 1:
        return False
    env = torchrun_env()
    return env[0] != 0 if env is not None else config.node_rank > 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_group(rank: int, world: int, device: str, addr: str, port: int) -> None:
    kwargs = {"backend": backend_for(device), "rank": rank, "world_size": world,
              "timeout": timedelta(seconds=TIMEOUT_S)}
    if device.startswith("cuda"):  # NCCL: every rank its own GPU before the group forms (object collectives use it)
        torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
    if world > 1 and rank == 0:
        import sys

        print(f"[adaspec] waiting for {world - 1} other rank(s) at {addr or os.environ.get('MASTER_ADDR')}:"
              f"{port or os.environ.get('MASTER_PORT')} ({backend_for(device)})", file=sys.stderr, flush=True)
    try:
        if torchrun_env() is not None:
            dist.init_process_group(init_method="env://", **kwargs)
        else:
            dist.init_process_group(init_method=f"tcp://{addr}:{port}", **kwargs)
    except (RuntimeError, OSError) as e:  # the port is taken, the address is not this machine's, ...
        raise UserError(f"the process-group rendezvous at {addr}:{port} failed ({str(e).splitlines()[0]}); pass "
                        "another --master_port or check --master_node_addr", param="--master_port") from None


def broadcast(obj=None, group=None):
    """Rank 0's Python object, on every rank (the others pass nothing)."""
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def leave_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def agree(error: str | None) -> None:
    """Every rank's load outcome; raises UserError on every rank if any rank failed."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, error)
    failed = [(r, e) for r, e in enumerate(out) if e]
    if failed:
        r, e = failed[0]
        raise UserError(f"rank {r} of {len(out)} could not start: {e}")


@dataclasses.dataclass
class Launch:
    rank: int
    world: int
    processes: list

    stopping: bool = False

    def watch(self) -> None:
        """A rank that dies before a clean stop ends this process too, with its exit code, instead
        of leaving it blocked in a collective until the timeout."""
        import sys
        import threading
        import time

        def run():
            while not self.stopping:
                for p in self.processes:
                    if p.exitcode not in (None, 0) and not self.stopping:
                        print(f"adaspec: error: rank process {p.name} exited with code {p.exitcode}; stopping",
                              file=sys.stderr, flush=True)
                        os._exit(p.exitcode if p.exitcode > 0 else 1)
                time.sleep(0.5)

        threading.Thread(target=run, name="adaspec-rank-watch", daemon=True).start()

    def leave(self) -> None:
        """Leave the process group and wait for this node's spawned ranks (they exit on their own:
        after "stop", or after an agreed refusal); not a crash for the watchdog."""
        self.stopping = True
        leave_group()
        self.join()

    def join(self, timeout: float = 30.0) -> None:
        self.stopping = True
        for p in self.processes:
            p.join(timeout)
            if p.is_alive():
                p.terminate()


def spawn_ranks(config, target, args: tuple) -> Launch:
    """Rank 0 (node 0) or a node's first process: spawn this node's other ranks running
    `target(rank, world, addr, port, config, *args)`, then join the group as this node's first rank."""
    world = config.tp_size * config.dp_size
    if dist.is_initialized():
        raise UserError("this process already holds a parallel engine (its process group); one process holds one at "
                        "a time: close() the other first, or use another process", param="--tp_size")
    env = torchrun_env()
    if env is not None:
        if env[1] != world:
            raise UserError(f"torchrun started {env[1]} processes but --tp_size x --dp_size is {world}",
                            param="--tp_size")
        init_group(env[0], world, config.device, "", 0)
        return Launch(env[0], world, [])
    per_node = world // config.nnodes
    first = config.node_rank * per_node
    port = config.master_port or free_port()
    addr = config.master_node_addr
    if config.device.startswith("cuda") and torch.cuda.device_count() < per_node:
        raise UserError(f"{per_node} ranks per node need {per_node} CUDA devices; this node has "
                        f"{torch.cuda.device_count()}", param="--tp_size")
    ctx = torch.multiprocessing.get_context("spawn")
    procs = []
    for rank in range(first + 1, first + per_node):
        p = ctx.Process(target=target, args=(rank, world, addr, port, config, *args), daemon=True,
                        name=f"adaspec-rank{rank}")
        p.start()
        procs.append(p)
    launch = Launch(first, world, procs)
    launch.watch()
    init_group(first, world, config.device, addr, port)
    return launch


def collective_device() -> str:
    """Where tensors for collectives live: the current GPU under NCCL, else the CPU."""
    return f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"


def rank_device(config, rank: int) -> str:
    """Each rank's device: cuda:<local rank> on CUDA, cpu otherwise."""
    if not config.device.startswith("cuda"):
        return "cpu"
    return f"cuda:{rank % max(1, torch.cuda.device_count())}"
