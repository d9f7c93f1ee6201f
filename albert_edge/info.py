"""What a path holds: a checkpoint (HF directory, original TF checkpoint), a converted model file
(.onnx, .tflite) or a conversion output directory with its manifest.json.

The front of `albert-edge info`, like the CLI it spans both sides: model files and conversion
outputs are read on the device side (:mod:`albert_edge.formats.describe`), checkpoints on the
build side (:func:`albert_edge.checkpoints.describe`, which needs torch), imported only for one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import AlbertEdgeError
from .formats.describe import MODEL_SUFFIXES, describe_manifest, describe_model_file
from .hub import resolve

__all__ = ["describe"]


def describe(path: str | os.PathLike) -> dict[str, Any]:
    """A JSON-able description of ``path``; raises AlbertEdgeError when it is none of the above."""
    path = resolve(path)
    if not path.exists() and not Path(str(path) + ".index").exists():
        raise AlbertEdgeError(f"{path} does not exist")
    if path.is_file() and path.suffix.lower() in MODEL_SUFFIXES:
        return describe_model_file(path)
    if path.is_dir() and (path / "manifest.json").is_file():
        return describe_manifest(path)
    from .checkpoints import describe as describe_checkpoint  # build side: needs torch

    return describe_checkpoint(path)
