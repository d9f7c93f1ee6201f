"""A flatbuffer table read by field number, in the standard library and numpy: the base of our
own accessors for .tflite (:mod:`.tflite_schema`), .pte (:mod:`.pte_schema`) and ONNX Runtime .ort
(:mod:`.ort_schema`) files, so that reading a model file needs no generated bindings and no
runtime.

Every read is bounds-checked: a damaged file raises ``struct.error``, ``IndexError`` or
``ValueError`` (which the readers turn into one line), never reads past the buffer.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["Table", "root"]


class Table:
    """A flatbuffer table at ``pos`` of ``buf``: reads its fields by number (the order of the
    fields in the schema, counting from 0)."""

    def __init__(self, buf: bytes, pos: int):
        if not 0 <= pos <= len(buf) - 4:
            raise IndexError(f"a table at {pos} lies outside the {len(buf)}-byte buffer")
        self._buf, self._pos = buf, pos

    def _u32(self, at: int) -> int:
        if not 0 <= at <= len(self._buf) - 4:
            raise IndexError(f"an offset at {at} lies outside the {len(self._buf)}-byte buffer")
        return struct.unpack_from("<I", self._buf, at)[0]

    def _at(self, field: int) -> int:
        """Where ``field`` is stored, or 0 when it is absent (holds its default)."""
        vtable = self._pos - struct.unpack_from("<i", self._buf, self._pos)[0]
        if not 0 <= vtable <= len(self._buf) - 4:
            raise IndexError(f"a vtable at {vtable} lies outside the buffer")
        entry = 4 + 2 * field
        if entry >= struct.unpack_from("<H", self._buf, vtable)[0]:
            return 0
        offset = struct.unpack_from("<H", self._buf, vtable + entry)[0]
        return self._pos + offset if offset else 0

    def _scalar(self, field: int, fmt: str, default: int = 0) -> int:
        at = self._at(field)
        return struct.unpack_from(fmt, self._buf, at)[0] if at else default

    def _target(self, field: int) -> int:
        """The position an offset field points at (0: absent)."""
        at = self._at(field)
        return at + self._u32(at) if at else 0

    def _length(self, field: int, element_size: int = 4) -> int:
        vector = self._target(field)
        if not vector:
            return 0
        n = self._u32(vector)
        if vector + 4 + n * element_size > len(self._buf):
            raise IndexError(f"a vector of {n} elements runs past the end of the buffer")
        return n

    def _table(self, field: int, index: int, cls):
        vector = self._target(field)
        if not vector:
            return None
        n = self._length(field)
        if not 0 <= index < n:
            raise IndexError(f"element {index} of a vector of {n}")
        element = vector + 4 + 4 * index
        return cls(self._buf, element + self._u32(element))

    def _child(self, field: int, cls):
        """The table an offset field points at (None when absent)."""
        target = self._target(field)
        return cls(self._buf, target) if target else None

    def _string(self, field: int) -> bytes | None:
        at = self._target(field)
        if not at:
            return None
        size = self._u32(at)
        if at + 4 + size > len(self._buf):
            raise IndexError("a string runs past the end of the buffer")
        return bytes(self._buf[at + 4:at + 4 + size])

    def _strings(self, field: int) -> list[bytes]:
        """A vector of strings (empty when absent)."""
        vector = self._target(field)
        if not vector:
            return []
        out = []
        for index in range(self._length(field)):
            element = vector + 4 + 4 * index
            at = element + self._u32(element)
            size = self._u32(at)
            if at + 4 + size > len(self._buf):
                raise IndexError("a string runs past the end of the buffer")
            out.append(bytes(self._buf[at + 4:at + 4 + size]))
        return out

    def _numpy(self, field: int, dtype) -> np.ndarray | int:
        """A vector of scalars as numpy (0 when absent, as the generated bindings return)."""
        at = self._target(field)
        if not at:
            return 0
        dtype = np.dtype(dtype).newbyteorder("<")
        return np.frombuffer(self._buf, dtype=dtype, count=self._length(field, dtype.itemsize), offset=at + 4)

    def _bytes_span(self, field: int) -> tuple[int, int] | None:
        """(start, size) of a ``[ubyte]`` vector within the buffer (None when absent)."""
        at = self._target(field)
        if not at:
            return None
        return at + 4, self._length(field, 1)


def root(buf: bytes, cls, offset: int = 0):
    """The root table of the flatbuffer that starts at ``offset`` of ``buf``."""
    if len(buf) < offset + 8:
        raise IndexError("too short for a flatbuffer")
    return cls(buf, offset + struct.unpack_from("<I", buf, offset)[0])
