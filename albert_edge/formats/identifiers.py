"""The identifier each kind of model file starts with, and the one check of it.

A flatbuffer file (.tflite, .ort, .pte) names its schema in four bytes after the root offset; an
ONNX ModelProto starts with its ir_version (field 1, varint: the byte 0x08). The readers, the
runtime and the table of formats (:mod:`.kinds`) all check a file's first bytes here, so each
identifier is written once. Standard library only, and nothing of albert_edge's but its errors:
every reader can import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import RuntimeUnavailable

__all__ = ["Identifier", "ONNX", "ORT", "TFLITE", "EXECUTORCH", "HEAD_BYTES"]

HEAD_BYTES = 8  # enough of a file's start for every identifier below


@dataclass(frozen=True)
class Identifier:
    """``magic`` at byte ``offset`` of the file; ``refusal`` is the line that says a file lacks it."""

    magic: bytes
    offset: int
    refusal: str  # "not a TFLite model (no TFL3 identifier)"

    def found(self, head: bytes | bytearray | memoryview) -> bool:
        """Whether ``head`` (a file's first bytes, or all of them) starts as such a file does."""
        end = self.offset + len(self.magic)
        return len(head) >= end and bytes(head[self.offset:end]) == self.magic

    def check(self, path: str | os.PathLike) -> None:
        """RuntimeUnavailable, ``"{path}: {refusal}"``, when the file at ``path`` lacks the identifier."""
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
        if not self.found(head):
            raise RuntimeUnavailable(f"{path}: {self.refusal}")


ONNX = Identifier(b"\x08", 0, "not an ONNX model")
ORT = Identifier(b"ORTM", 4, "not an ONNX Runtime .ort model (no ORTM identifier)")
TFLITE = Identifier(b"TFL3", 4, "not a TFLite model (no TFL3 identifier)")
EXECUTORCH = Identifier(b"ET12", 4, "not an ExecuTorch program (no ET12 identifier)")
