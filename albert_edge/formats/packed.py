"""What a MediaPipe text-task file carries for the app, checked against the model it carries it for.

A ``convert --to mediapipe`` file is a .tflite with TFLite metadata whose packed files are the
tokenizer (``spiece.model``) and, for a classifier, ``labels.txt``. MediaPipe reads them only when
the app creates its task, so a file whose packed tokenizer is damaged, or belongs to another
vocabulary, looks whole to every reader that stops at the metadata and fails on the phone.
:func:`check_packed` opens what is packed: sentencepiece loads the tokenizer, its piece count
equals the rows of the model's token-embedding table (the table the lookup fed by the ``ids``
input reads, found in the flatbuffer), and the labels name the outputs
(:func:`albert_edge.labels.check_task_labels`). ``info``, ``inspect``, ``profile``, ``report`` and
the demo call it before they describe, measure or run such a file; a file that cannot work is one
PackedFileError naming the file, the part and the fix.

Device side: the standard library, numpy and sentencepiece (a base dependency; where it is
missing the tokenizer is reported as not checked, never as passed).
"""

from __future__ import annotations

import os
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import AlbertEdgeError
from ..labels import check_task_labels
from . import tflite_schema as schema
from .identifiers import TFLITE
from .tflite_metadata import packed_files, read_metadata

__all__ = ["PackedFileError", "PackedCheck", "check_packed", "embedding_rows", "IDS_INPUT"]

IDS_INPUT = "ids"  # the token-id input's name in a MediaPipe text task's metadata
_FIX = "convert the checkpoint again (albert-edge convert --to mediapipe)"
# Operators between the ids input and the embedding lookup that keep the ids as they are.
_PASS = frozenset({"CAST", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "IDENTITY"})
# Lookups: the operator and the positions of its (table, indices) inputs.
_LOOKUPS = {"GATHER": (0, 1), "EMBEDDING_LOOKUP": (1, 0)}
_OP_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


class PackedFileError(AlbertEdgeError, ValueError):
    """A MediaPipe file's packed tokenizer or labels cannot work with the model it carries."""


@dataclass
class PackedCheck:
    """What :func:`check_packed` found in a file that passed it."""

    task: str
    tokenizer_file: str | None = None
    tokenizer_pieces: int | None = None  # None: not loaded (see ``not_checked``)
    embedding_rows: int | None = None
    labels: int = 0
    not_checked: list[str] = field(default_factory=list)  # what could not be checked here, and why

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """One line for a table: what was checked, and what was not."""
        said = []
        if self.tokenizer_pieces is not None:
            said.append(f"{self.tokenizer_file} loads, {self.tokenizer_pieces} pieces"
                        + (f" = {self.embedding_rows} embedding rows" if self.embedding_rows is not None else ""))
        if self.task == "TextClassifier":
            said.append(f"{self.labels} labels = {self.labels} outputs")
        said += [f"not checked: {why}" for why in self.not_checked]
        return "; ".join(said) or "nothing packed to check"


def check_packed(path: str | os.PathLike, raw: bytes | None = None) -> PackedCheck | None:
    """Check the packed files of the .tflite at ``path`` (its bytes ``raw`` when already read)
    against the model: None for a file that is not a .tflite or has no text task in its metadata;
    PackedFileError, one line, when the tokenizer or the labels cannot work with the model."""
    path = Path(path)
    if path.suffix.lower() != ".tflite":
        return None
    if raw is None:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise PackedFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if not TFLITE.found(raw):
        return None  # not a TFLite model: its reader says so in its own words
    try:
        meta = read_metadata(raw)
        packed = packed_files(raw) if meta is not None else {}
    except ValueError as exc:
        from .tflite_check import check_tflite

        check_tflite(path)  # a damaged model, not only its metadata: the file's own one line says so
        raise PackedFileError(f"{path}: {exc}; {_FIX}") from None
    if meta is None or (meta.tokenizer is None and meta.task == "unknown"):
        return None
    found = PackedCheck(task=meta.task)
    if meta.tokenizer is not None:
        _check_tokenizer(path, raw, meta, packed, found)
    if meta.task == "TextClassifier":
        outputs = _outputs(path, raw)
        try:
            check_task_labels(meta.to_dict(), outputs, str(path))
        except AlbertEdgeError as exc:
            raise PackedFileError(str(exc)) from None
        found.labels = len(meta.labels)
    return found


def _check_tokenizer(path: Path, raw: bytes, meta, packed: dict[str, bytes], found: PackedCheck) -> None:
    if not meta.tokenizer_files:
        raise PackedFileError(f"{path}: its metadata names a {meta.tokenizer} but no vocabulary file for it, so "
                              f"MediaPipe cannot tokenize text for it; {_FIX}")
    name = meta.tokenizer_files[0]
    found.tokenizer_file = name
    if name not in packed:
        raise PackedFileError(f"{path}: its metadata names the tokenizer file {name}, which is not packed in the "
                              f"file, so MediaPipe cannot tokenize text for it; {_FIX}")
    if meta.tokenizer != "SentencePieceTokenizer":
        found.not_checked.append(f"{name} ({meta.tokenizer}; sentencepiece tokenizers are loaded)")
        return
    pieces = _pieces(path, name, packed[name], found)
    rows = embedding_rows(raw, meta.inputs)
    found.embedding_rows = rows
    if rows is None:
        found.not_checked.append(f"{name} against the model's token-embedding table (no embedding lookup is fed "
                                 f"by its {IDS_INPUT!r} input)")
    elif pieces is not None and pieces != rows:
        raise PackedFileError(f"{path}: its packed {name} has {pieces} pieces but the model's token-embedding table "
                              f"has {rows} rows: the tokenizer is not the model's own, and its ids would be wrong "
                              f"or out of range; {_FIX} from a checkpoint whose spiece.model it was trained with")


def _pieces(path: Path, name: str, model: bytes, found: PackedCheck) -> int | None:
    """sentencepiece's piece count of the packed ``model``; None (noted) where sentencepiece is missing."""
    if not model:
        raise PackedFileError(f"{path}: its packed {name} is empty, so MediaPipe cannot tokenize text for it; {_FIX}")
    try:
        import sentencepiece as spm
    except ImportError:  # a base dependency; said, never taken as passed
        found.not_checked.append(f"{name} (sentencepiece is not installed: pip install sentencepiece)")
        return None
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model)
    except (RuntimeError, OSError, TypeError):  # sentencepiece's reason names its own source lines only
        raise PackedFileError(f"{path}: its packed {name} is not a sentencepiece model (sentencepiece cannot parse "
                              f"it), so MediaPipe cannot tokenize text for it; {_FIX}") from None
    pieces = int(processor.GetPieceSize())
    if pieces <= 0:
        raise PackedFileError(f"{path}: its packed {name} holds no piece, so MediaPipe cannot tokenize text for it; "
                              f"{_FIX}")
    found.tokenizer_pieces = pieces
    return pieces


def embedding_rows(raw: bytes, inputs: list[str]) -> int | None:
    """Rows of the token-embedding table of the TFLite model ``raw``: the table of the lookup
    (GATHER, EMBEDDING_LOOKUP) in the main subgraph whose indices are the ``ids`` input (metadata
    names ``inputs``, in the subgraph's input order), through casts and reshapes. None when no such
    lookup is found. Reads the flatbuffer's tensor shapes, never its weights."""
    try:
        model = schema.Model.GetRootAs(raw, 0)
        sub = model.Subgraphs(0)
        graph_inputs = [int(i) for i in np.atleast_1d(sub.InputsAsNumpy())]
        if IDS_INPUT not in inputs or len(inputs) != len(graph_inputs):
            return None
        ids = {graph_inputs[inputs.index(IDS_INPUT)]}
        codes = [max(int(model.OperatorCodes(i).BuiltinCode()), int(model.OperatorCodes(i).DeprecatedBuiltinCode()))
                 for i in range(model.OperatorCodesLength())]
        ops = [sub.Operators(o) for o in range(sub.OperatorsLength())]
        for op in ops:  # operators are stored in execution order: what passes the ids on comes first
            name = _OP_NAMES.get(codes[op.OpcodeIndex()], "")
            ins = [int(i) for i in np.atleast_1d(op.InputsAsNumpy())]
            if name in _PASS and ins and ins[0] in ids:
                ids.update(int(o) for o in np.atleast_1d(op.OutputsAsNumpy()))
            elif name in _LOOKUPS and len(ins) >= 2 and ins[_LOOKUPS[name][1]] in ids:
                shape = sub.Tensors(ins[_LOOKUPS[name][0]]).ShapeAsNumpy()
                if not isinstance(shape, int) and len(shape) == 2 and int(shape[0]) > 0:
                    return int(shape[0])
    except (IndexError, ValueError, TypeError, AttributeError, struct.error):
        return None  # a damaged graph: its reader says so
    return None


def _outputs(path: Path, raw: bytes) -> list[dict[str, Any]]:
    """The main subgraph's outputs as MediaPipe reads them (by position): their shapes."""
    try:
        model = schema.Model.GetRootAs(raw, 0)
        sub = model.Subgraphs(0)
        out = []
        for i in np.atleast_1d(sub.OutputsAsNumpy()):
            tensor = sub.Tensors(int(i))
            dims = tensor.ShapeSignatureAsNumpy() if not tensor.ShapeSignatureIsNone() else tensor.ShapeAsNumpy()
            out.append({"shape": [] if isinstance(dims, int) else [int(d) for d in dims]})
        return out
    except (IndexError, ValueError, TypeError, AttributeError, struct.error) as exc:
        raise PackedFileError(f"{path} is a damaged TFLite model ({type(exc).__name__}: {exc})") from None
