"""Training checkpoints: a Hugging Face directory plus what a run needs to go on.

``OUT/checkpoint-0000500/`` holds

- ``config.json`` + ``model.safetensors`` (written by :func:`albert_edge.checkpoints.save`) and
  ``spiece.model``: transformers and the albert-edge converters load it as it is;
- ``optimizer.pt``: the optimizer's state dict (tensors and numbers only, read back with
  ``torch.load(weights_only=True)``, which refuses anything else);
- ``trainer_state.json``: the step, the data stream's position and the options that shape the
  run, which a resume must match.

The directory is assembled under a temporary name and renamed into place, so a crash while
saving leaves the previous checkpoint as it was and no half-written one behind.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import checkpoints
from ..errors import CheckpointError
from ..files import atomic_write, staged

__all__ = [
    "TRAINER_STATE", "OPTIMIZER_STATE", "save_training_checkpoint", "find_checkpoint",
    "read_trainer_state", "read_optimizer_state", "export_model", "check_same_run", "has_checkpoints",
]

log = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"
OPTIMIZER_STATE = "optimizer.pt"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def export_model(model: nn.Module, out_dir: str | os.PathLike, spiece: str | os.PathLike) -> Path:
    """The model and its tokenizer as a Hugging Face directory (each file written atomically)."""
    return checkpoints.save(model, out_dir, spiece=spiece)


def save_training_checkpoint(out_dir: str | os.PathLike, step: int, model: nn.Module,
                             optimizer: torch.optim.Optimizer, spiece: str | os.PathLike,
                             trainer_state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``out_dir/checkpoint-{step}`` atomically and keep only the newest ``keep``."""
    out = Path(out_dir)
    final = out / f"checkpoint-{step:07d}"
    with staged(final, directory=True, keep=False) as tmp:  # a rerun of the same step replaces it whole
        export_model(model, tmp, spiece)
        state = {"optimizer": optimizer.state_dict()}
        atomic_write(tmp / OPTIMIZER_STATE, lambda path: torch.save(state, path))  # a full disk: one clear line
        atomic_write(tmp / TRAINER_STATE, json.dumps(trainer_state, indent=2) + "\n")
    _prune(out, keep)
    return final


def _checkpoints(out: Path) -> list[tuple[int, Path]]:
    found = []
    for path in out.iterdir() if out.is_dir() else ():
        match = _CHECKPOINT.match(path.name)
        if match and (path / TRAINER_STATE).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def _prune(out: Path, keep: int) -> None:
    if keep <= 0:
        return
    for _, path in _checkpoints(out)[:-keep]:
        shutil.rmtree(path, ignore_errors=True)


def has_checkpoints(path: str | os.PathLike) -> bool:
    return bool(_checkpoints(Path(path)))


def find_checkpoint(path: str | os.PathLike) -> Path:
    """A training checkpoint directory, or the newest ``checkpoint-*`` inside a run directory."""
    path = Path(path)
    if (path / TRAINER_STATE).is_file():
        return path
    found = _checkpoints(path)
    if not found:
        raise CheckpointError(
            f"{path} is not a training checkpoint (no {TRAINER_STATE}) and holds no checkpoint-* directory"
        )
    return found[-1][1]


def read_trainer_state(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / TRAINER_STATE).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{directory / TRAINER_STATE} cannot be read: {exc}") from None
    if not isinstance(data, dict) or "step" not in data:
        raise CheckpointError(f"{directory / TRAINER_STATE} is not a trainer state (no 'step')")
    return data


def read_optimizer_state(directory: Path) -> dict[str, Any]:
    path = directory / OPTIMIZER_STATE
    if not path.is_file():
        raise CheckpointError(f"{directory} has no {OPTIMIZER_STATE}: it cannot be resumed exactly")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # weights_only refuses anything but tensors and plain containers
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path} is not a plain optimizer state: {reason}") from None
    if not isinstance(data, dict) or "optimizer" not in data:
        raise CheckpointError(f"{path} holds no optimizer state")
    return data["optimizer"]


def check_same_run(saved: dict[str, Any], current: dict[str, Any], directory: Path) -> None:
    """Raise CheckpointError naming the first setting where the run differs from the checkpoint."""
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            raise CheckpointError(
                f"cannot resume from {directory}: it was trained with {key}={_short(saved.get(key))} "
                f"but this run has {key}={_short(current.get(key))}"
            )


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."
