"""The fp32 model file a quantization starts from, with what its manifest says about it.

Only files albert-edge converted are accepted: the manifest beside them records the source
checkpoint, head, sequence length and config that a TFLite scheme needs to rebuild the graph,
and the accuracy check needs to know what the outputs are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from albert_edge.config import AlbertConfig
from albert_edge.formats import manifest as manifest_io
from albert_edge.formats.graph import INPUT_NAMES
from albert_edge.formats.weights import model_format, read_file
from albert_edge.errors import ConfigError, ConversionError

__all__ = ["ModelFile", "open_model_file", "INPUT_NAMES"]



@dataclass(frozen=True)
class ModelFile:
    path: Path
    format: str
    manifest: manifest_io.Manifest
    entry: manifest_io.FileEntry
    config: AlbertConfig
    head: str
    seq_len: int
    checkpoint: Path | None
    output_names: tuple[str, ...]

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def adaptive(self) -> dict | None:
        """The exit rule of a file that stops early (convert --adaptive), as its manifest records it."""
        return self.manifest.source.get("adaptive")


def open_model_file(path: str | os.PathLike) -> ModelFile:
    """Check that ``path`` is an fp32 file albert-edge converted; raise one clear line if not."""
    path = Path(path)
    fmt = model_format(path)
    manifest_path = path.parent / manifest_io.MANIFEST_NAME
    if not manifest_path.is_file():
        raise ConversionError(f"{path} is not an albert-edge model file: no {manifest_io.MANIFEST_NAME} "
                              "beside it (make it with `albert-edge convert`)")
    manifest = manifest_io.read(manifest_path)
    try:
        entry = manifest.file(path.name)
    except KeyError:
        raise ConversionError(f"{manifest_path} does not list {path.name}: "
                              "it is not a file albert-edge converted") from None
    if entry.precision != "fp32":
        raise ConversionError(f"{path.name} is already quantized ({entry.precision}); quantize the fp32 file")
    if entry.format != fmt:
        raise ConversionError(f"{manifest_path} says {path.name} is {entry.format}, but its suffix says {fmt}")
    manifest_io.check_file(path, entry, manifest_path)  # FileChanged: a ConversionError naming what differs
    contents = read_file(path)
    inputs = tuple(s.name for s in contents.inputs)
    if inputs == ("text",):  # convert --to onnx-text: the tokenizer is a node in front of the model
        raise ConversionError(f"{path.name} takes text: its quantized twin is made at conversion, from the token-id "
                              "graph (albert-edge convert CHECKPOINT --to onnx-text --scheme int8-dynamic)")
    if sorted(inputs) != sorted(INPUT_NAMES):
        raise ConversionError(f"{path.name} has inputs {', '.join(inputs) or '(none)'}; "
                              f"an albert-edge model takes {', '.join(INPUT_NAMES)}")
    try:
        config = AlbertConfig.from_hf_dict(manifest.config)
    except ConfigError as exc:
        raise ConversionError(f"{manifest_path}: its config is invalid: {exc}") from None
    checkpoint = manifest.source.get("checkpoint")
    return ModelFile(
        path=path, format=fmt, manifest=manifest, entry=entry, config=config,
        head=str(manifest.source.get("head") or "base"),
        seq_len=int(manifest.seq_len or 128),
        checkpoint=Path(checkpoint) if checkpoint else None,
        output_names=tuple(s.name for s in contents.outputs),
    )
