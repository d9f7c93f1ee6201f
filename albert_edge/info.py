"""What a path holds: a checkpoint (HF directory, original TF checkpoint), a converted model file
(.onnx, .tflite) or a conversion output directory with its manifest.json.

The front of `albert-edge info`, like the CLI it spans both sides: model files and conversion
outputs are read on the device side (:mod:`albert_edge.formats.describe`), checkpoints on the
build side (:func:`albert_edge.checkpoints.describe`, which needs torch), imported only for one.
A conversion output's files, and a model file with a manifest beside it, are checked against the
manifest first, with the app files and the transformers-js/ folder it lists
(:func:`albert_edge.formats.manifest.check_listed` / ``check_beside``): what is described is what is there.
A MediaPipe file's packed tokenizer and labels are opened and checked against its model
(:func:`albert_edge.formats.packed.check_packed`): a file MediaPipe cannot run is not described as whole."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import AlbertEdgeError
from .formats.describe import describe_manifest, describe_model_file
from .formats.kinds import find
from .formats.manifest import MANIFEST_NAME, check_beside, check_listed
from .formats.packed import check_packed
from .hub import resolve

__all__ = ["describe"]


def describe(path: str | os.PathLike) -> dict[str, Any]:
    """A JSON-able description of ``path``; raises AlbertEdgeError when it is none of the above."""
    path = resolve(path)
    if not path.exists() and not Path(str(path) + ".index").exists():
        raise AlbertEdgeError(f"{path} does not exist")
    if path.is_file() and find(path) is not None:  # a model file of a format the device side reads
        if (path.parent / MANIFEST_NAME).is_file():
            describe_manifest(path.parent)  # one that cannot be read is refused, not passed over
            check_beside(path)
        packed = check_packed(path)
        data = describe_model_file(path)
        if packed is not None:
            data["packed"] = packed.to_dict() | {"summary": packed.summary()}
        return data
    if path.is_dir() and (path / MANIFEST_NAME).is_file():
        check_listed(path)
        data = describe_manifest(path)
        for entry in data["files"]:  # each MediaPipe file's tokenizer and labels against its model
            check_packed(path / entry["name"])
        return data
    from .checkpoints import describe as describe_checkpoint  # build side: needs torch

    return describe_checkpoint(path)

