"""Running the trainers under ``torchrun``: process group, device, DDP wrapping, reductions.

The same entry point runs as one process or as many. Started by ``torchrun`` (which sets
``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and the rendezvous address), each process joins the
group — NCCL when it has a GPU, gloo on CPU — and trains its slice of every global batch with
PyTorch DistributedDataParallel. For example, two machines with 8 GPUs each::

    # on every node; --node_rank 0 on the first, 1 on the second
    torchrun --nnodes 2 --nproc_per_node 8 --node_rank 0 \\
        --rdzv_backend c10d --rdzv_endpoint first-node:29500 \\
        "$(which albert-edge)" pretrain --corpus data/ --tokenizer spiece.model ...

and two CPU processes on one machine (what the test suite runs)::

    torchrun --nproc_per_node 2 "$(which albert-edge)" pretrain --device cpu ...
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["DistContext", "distributed", "init_distributed", "wrap", "all_reduce_sum", "barrier", "shutdown",
           "pick_device"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistContext:
    """Where this process stands: its rank among ``world_size`` processes and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    owns_group: bool = False  # True when init_distributed started the process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def pick_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """"auto" is the process's GPU when there is one, else the CPU; or "cpu", "cuda", "cuda:1"."""
    from ..errors import ConfigError

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"device {name!r} is not one albert-edge trains on: 'auto', 'cpu', 'cuda' or 'cuda:N'")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {name!r} was asked for but torch sees no CUDA GPU")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device {name!r} was asked for but torch sees {torch.cuda.device_count()} GPU(s)")
        if device.index is None:
            device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    return device


def init_distributed(device: str = "auto", threads: int | None = None) -> DistContext:
    """Join the torchrun process group if there is one; a single process otherwise.

    ``threads`` sets torch's CPU threads. On a CPU that other work shares, fewer threads than
    cores is often much faster: idle-waiting OpenMP threads lose their turn to other processes.
    """
    if threads is not None:
        if threads < 1:
            from ..errors import ConfigError

            raise ConfigError(f"threads ({threads}) must be at least 1")
        torch.set_num_threads(threads)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = pick_device(device, local_rank)
    owns_group = world_size > 1 and not dist.is_initialized()
    if owns_group:
        backend = "nccl" if dev.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
        if dev.type == "cpu" and threads is None:
            # Processes on one machine share its cores: give each its part.
            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
        log.info("rank %d of %d on %s (%s)", rank, world_size, dev, backend)
    return DistContext(rank, world_size, local_rank, dev, owns_group)


def wrap(module: nn.Module, ctx: DistContext) -> nn.Module:
    """``module`` in DistributedDataParallel when there are several processes; as is otherwise."""
    if not ctx.distributed:
        return module
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids)


def no_sync(module: nn.Module, skip: bool):
    """Skip DDP's gradient all-reduce for this backward (all but the last micro-batch)."""
    return module.no_sync() if skip and hasattr(module, "no_sync") else nullcontext()


def all_reduce_sum(tensor: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Sum ``tensor`` over all processes (in place); a no-op for one process."""
    if ctx.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()


def shutdown(ctx: DistContext) -> None:
    """Leave the process group if init_distributed started it (not one the caller started)."""
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def distributed(device: str = "auto", threads: int | None = None) -> Iterator[DistContext]:
    """``init_distributed`` for the length of a ``with`` block, then ``shutdown``."""
    ctx = init_distributed(device, threads)
    try:
        yield ctx
    finally:
        shutdown(ctx)
