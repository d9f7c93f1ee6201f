"""One optimizer step, shared by pretraining and fine-tuning.

A step takes the global batch as micro-batches (gradient accumulation) and divides every loss by
its *global* count — masked tokens, examples, labelled tokens — summed over all micro-batches
and all processes before the first backward. The gradient is therefore exactly the gradient of
the mean loss over the global batch, whatever the number of processes or micro-batches, which
is what makes DDP training match one process on the same batch.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from ..errors import ConfigError, OutputError, user_message
from .distributed import DistContext, all_reduce_sum, no_sync
from .errors import TrainingError

__all__ = ["PRECISIONS", "RunOptions", "Objective", "StepOutput", "JsonLog", "autocast", "train_step", "step_seed", "to_device"]

# "auto": bf16 autocast on a GPU, fp32 on CPU. "bf16" also autocasts on CPU, which pays off on
# CPUs with bf16 instructions (AVX512-BF16, AMX); the weights and the optimizer stay fp32.
PRECISIONS = ("auto", "bf16", "fp32")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What every training run takes besides its data and model: the optimizer's steps and the
    machine. Keywords only, so pretraining and fine-tuning list their own fields first."""

    batch_size: int = 32  # per process and micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    optimizer: str = "adamw"
    lr: float = 1e-4
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 0
    log_every: int = 10
    device: str = "auto"
    precision: str = "auto"  # see PRECISIONS
    threads: int | None = None  # torch CPU threads (None: torch's default)
    force: bool = False  # write into an out_dir that holds our own earlier output (never an input)

    def __post_init__(self) -> None:
        for name in ("batch_size", "grad_accum", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} ({getattr(self, name)}) must be at least 1")


def run_field(default):
    """A RunOptions field with another default in a subclass (still a keyword)."""
    return field(default=default, kw_only=True)


class Objective(nn.Module):
    """A model plus its loss. ``counts`` gives the denominators of each loss term for one
    micro-batch; ``forward`` returns (loss already divided by the global counts, statistic sums)."""

    def counts(self, batch: dict[str, Tensor]) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def forward(self, batch: dict[str, Tensor], denominators: Tensor) -> tuple[Tensor, Tensor]:  # pragma: no cover
        raise NotImplementedError


@dataclass
class StepOutput:
    stats: Tensor  # the objective's statistic sums over the global batch
    grad_norm: float


def step_seed(seed: int, rank: int, step: int) -> int:
    """The seed of dropout for one step on one process: a function of (seed, rank, step) only,
    so a resumed run draws the same dropout masks as an uninterrupted one."""
    digest = hashlib.sha256(f"albert-edge/step/{seed}/{rank}/{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def autocast(device: torch.device, precision: str):
    """The autocast context for ``precision`` on ``device`` (a no-op for fp32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def to_device(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def train_step(wrapped: nn.Module, objective: Objective, optimizer: torch.optim.Optimizer,
               micro_batches: Sequence[dict[str, Tensor]], ctx: DistContext, max_grad_norm: float,
               precision: str, total_loss: Callable[[Tensor], float], step: int) -> StepOutput:
    """Forward/backward every micro-batch, check the loss, clip, and step the optimizer.

    ``wrapped`` is ``objective`` itself or its DDP wrapper. ``total_loss`` turns the global
    statistic sums into the loss that must stay finite; when it does not, TrainingError is
    raised before the optimizer touches the weights.
    """
    micro_batches = [to_device(b, ctx.device) for b in micro_batches]
    denominators = sum(objective.counts(b) for b in micro_batches).to(ctx.device, torch.float32)
    all_reduce_sum(denominators, ctx)
    denominators = denominators.clamp(min=1.0)
    stats = None
    for i, batch in enumerate(micro_batches):
        with no_sync(wrapped, skip=i < len(micro_batches) - 1):
            with autocast(ctx.device, precision):
                loss, batch_stats = wrapped(batch, denominators)
            # DDP averages gradients over processes; the loss is already a global mean.
            (loss * ctx.world_size).backward()
        stats = batch_stats.detach().float() if stats is None else stats + batch_stats.detach().float()
    all_reduce_sum(stats, ctx)
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else float("inf"))
    loss_value, norm_value = total_loss(stats), float(norm)
    if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
        what = "loss" if not math.isfinite(loss_value) else "gradient norm"
        raise TrainingError(
            f"the {what} became {loss_value if what == 'loss' else norm_value} at step {step}; "
            "the weights were not updated. Lower the learning rate (--lr) or raise the warmup"
        )
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepOutput(stats, norm_value)


class JsonLog:
    """Records as JSON lines in a file (the main process's; None elsewhere) and to a callback.
    A fresh log replaces an old file; a resumed run's log appends to it."""

    def __init__(self, path: Path | None, on_event: Callable[[dict], None] | None, fresh: bool = True):
        self.path, self.on_event = path, on_event
        if path is not None and fresh:
            self._write("w", "")

    def __call__(self, record: dict) -> None:
        if self.path is not None:
            self._write("a", json.dumps(record) + "\n")
        if self.on_event is not None:
            self.on_event(record)

    def _write(self, mode: str, text: str) -> None:
        try:
            with open(self.path, mode, encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            reason = user_message(exc)
            if reason is None:
                raise
            raise OutputError(f"cannot write {self.path}: {reason}") from None
