"""TFLite metadata, as MediaPipe Tasks and the TFLite Task Library read it: which text task a
.tflite is for, its input and output tensor names, whether the tokenizer is inside, the labels.

The metadata is a second flatbuffer (``metadata_schema.fbs``, file identifier ``M001``) in the
buffer that the model's ``TFLITE_METADATA`` entry names; the files it lists (spiece.model,
labels.txt) are packed after the model as a zip archive. Read in the standard library and numpy,
bounds-checked like every flatbuffer here: a damaged file raises ValueError naming what is wrong.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .flatbuffer import Table, root
from .tflite_schema import Model

__all__ = ["TaskMetadata", "read_metadata", "packed_files", "METADATA_KEY"]

METADATA_KEY = "TFLITE_METADATA"
_IDENTIFIER = b"M001"
# ProcessUnitOptions union members (metadata_schema.fbs).
_TOKENIZERS = {4: "BertTokenizer", 5: "SentencePieceTokenizer", 6: "RegexTokenizer"}
_TENSOR_AXIS_LABELS = 2  # AssociatedFileType


class _AssociatedFile(Table):
    def name(self) -> str:
        return (self._string(0) or b"").decode("utf-8", "replace")

    def type(self) -> int:
        return self._scalar(2, "<b")


def _files(table: Table, field_number: int) -> list[_AssociatedFile]:
    return [table._table(field_number, i, _AssociatedFile) for i in range(table._length(field_number))]


class _Tokenizer(Table):  # Bert-, SentencePiece- and RegexTokenizerOptions: the vocabulary files
    def files(self, kind: str) -> list[_AssociatedFile]:
        return _files(self, {"SentencePieceTokenizer": 0, "BertTokenizer": 0, "RegexTokenizer": 1}[kind])


class _ProcessUnit(Table):
    def kind(self) -> int:
        return self._scalar(0, "<B")

    def options(self) -> _Tokenizer | None:
        return self._child(1, _Tokenizer)


class _TensorMetadata(Table):
    def name(self) -> str:
        return (self._string(0) or b"").decode("utf-8", "replace")

    def files(self) -> list[_AssociatedFile]:
        return _files(self, 6)


class _SubGraphMetadata(Table):
    def tensors(self, field_number: int) -> list[_TensorMetadata]:
        return [self._table(field_number, i, _TensorMetadata) for i in range(self._length(field_number))]

    def input_process_units(self) -> list[_ProcessUnit]:
        return [self._table(5, i, _ProcessUnit) for i in range(self._length(5))]


class _ModelMetadata(Table):
    def string(self, field_number: int) -> str:
        return (self._string(field_number) or b"").decode("utf-8", "replace")

    def subgraphs(self) -> list[_SubGraphMetadata]:
        return [self._table(3, i, _SubGraphMetadata) for i in range(self._length(3))]


@dataclass
class TaskMetadata:
    """What an app's engine reads from the file's metadata."""

    task: str  # "TextClassifier", "TextEmbedder", or "unknown"
    name: str
    description: str
    inputs: list[str]
    outputs: list[str]
    tokenizer: str | None  # "SentencePieceTokenizer", ... or None
    tokenizer_files: list[str]
    tokenizer_embedded: bool  # every tokenizer file is in the packed archive
    labels: list[str] = field(default_factory=list)
    packed_files: list[str] = field(default_factory=list)
    min_parser_version: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_metadata(path_or_bytes: str | os.PathLike | bytes) -> TaskMetadata | None:
    """The file's TFLite metadata (None when it has none). Raises ValueError when the metadata
    or its packed files are damaged."""
    raw = path_or_bytes if isinstance(path_or_bytes, (bytes, bytearray)) else Path(path_or_bytes).read_bytes()
    try:
        blob = _metadata_buffer(bytes(raw))
        if blob is None:
            return None
        if blob[4:8] != _IDENTIFIER:
            raise ValueError(f"its {METADATA_KEY} buffer is not TFLite metadata (no {_IDENTIFIER.decode()} identifier)")
        return _read(blob, bytes(raw))
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"damaged TFLite metadata ({type(exc).__name__}: {exc})") from None


def _metadata_buffer(raw: bytes) -> bytes | None:
    model = Model.GetRootAs(raw, 0)
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if (entry.Name() or b"") == METADATA_KEY.encode():
            buf = model.Buffers(int(entry.Buffer()))
            if buf is None:
                raise ValueError(f"its {METADATA_KEY} entry names buffer {entry.Buffer()}, which is missing")
            if buf.Offset() > 1:
                return raw[buf.Offset():buf.Offset() + buf.Size()]
            data = buf.DataAsNumpy()
            return b"" if isinstance(data, int) else data.tobytes()
    return None


def _read(blob: bytes, raw: bytes) -> TaskMetadata:
    meta = root(blob, _ModelMetadata)
    subgraphs = meta.subgraphs()
    if not subgraphs:
        raise ValueError("the TFLite metadata describes no subgraph")
    sub = subgraphs[0]
    inputs, outputs = sub.tensors(2), sub.tensors(3)
    packed = _packed(raw)
    tokenizer, tokenizer_files = None, []
    for unit in sub.input_process_units():
        if unit.kind() in _TOKENIZERS:
            tokenizer = _TOKENIZERS[unit.kind()]
            options = unit.options()
            tokenizer_files = [f.name() for f in options.files(tokenizer)] if options is not None else []
    label_files = [f.name() for t in outputs for f in t.files() if f.type() == _TENSOR_AXIS_LABELS]
    labels = _labels(packed, label_files)
    if label_files:
        task = "TextClassifier"
    elif tokenizer is not None:
        task = "TextEmbedder"
    else:
        task = "unknown"
    return TaskMetadata(task=task, name=meta.string(0), description=meta.string(1), inputs=[t.name() for t in inputs],
                        outputs=[t.name() for t in outputs], tokenizer=tokenizer, tokenizer_files=tokenizer_files,
                        tokenizer_embedded=bool(tokenizer_files) and all(f in packed for f in tokenizer_files),
                        labels=labels, packed_files=sorted(packed), min_parser_version=meta.string(7))


def packed_files(raw: bytes) -> dict[str, bytes]:
    """The files packed after the TFLite model ``raw`` (spiece.model, labels.txt), by name; empty
    when nothing is packed. ValueError when the archive is damaged."""
    return _packed(bytes(raw))


def _packed(raw: bytes) -> dict[str, bytes]:
    """The files packed after the model (a zip archive whose entries the metadata names)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
    except zipfile.BadZipFile:
        return {}  # nothing packed
    except (zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise ValueError(f"its packed files are damaged ({exc})") from None
    try:
        with archive:
            return {name: archive.read(name) for name in archive.namelist()}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        # an archive that opens but whose entries do not read back (a bad CRC, a cut entry)
        raise ValueError(f"its packed files are damaged ({exc})") from None


def _labels(packed: dict[str, bytes], names: list[str]) -> list[str]:
    for name in names:
        if name not in packed:
            raise ValueError(f"its metadata names the label file {name}, which is not packed in the file")
        return [line for line in packed[name].decode("utf-8", "replace").splitlines() if line.strip()]
    return []
