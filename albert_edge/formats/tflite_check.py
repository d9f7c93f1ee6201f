"""A cheap structural check of a .tflite file before an interpreter opens it.

The TFLite interpreters read their flatbuffer without verifying it, and some damaged files make
them crash the whole process (tflite-runtime 2.14 segfaulted on half of a set of random
corruptions). This check walks the tables the interpreter reads: every offset, vtable, vector
and string inside the file, every tensor, buffer, operator-code and subgraph index in range,
and the stored bytes of each constant tensor equal to what its shape and type need. Weight
bytes are never read or copied: the file is memory-mapped and only the tables are touched, so the
check costs the same for any model size.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from pathlib import Path

from ..errors import RuntimeUnavailable

__all__ = ["DamagedModel", "check_tflite"]

_IDENTIFIER = b"TFL3"
_SCHEMA_VERSION = 3
# Bytes per element by TensorType (schema.fbs); None: no fixed size (strings, variants, int4 packed).
_ELEMENT_BYTES = (4, 2, 4, 1, 8, None, 1, 2, 8, 1, 8, 16, 8, None, None, 4, 2, None, 2, None, None, None, None)
# BuiltinOptions members whose tables hold vectors: union type -> (field, element bytes) of each.
_OPTION_VECTORS = {3: ((1, 4), (2, 4)),  # ConcatEmbeddingsOptions
                   17: ((0, 4),),  # ReshapeOptions.new_shape
                   30: ((0, 4),),  # SqueezeOptions.squeeze_dims
                   115: ((0, 4),)}  # BucketizeOptions.boundaries
_I32, _U32, _I64 = struct.Struct("<i"), struct.Struct("<I"), struct.Struct("<q")
_U16x2, _U8, _I8 = struct.Struct("<HH"), struct.Struct("<B"), struct.Struct("<b")


class DamagedModel(RuntimeUnavailable):
    """A .tflite file whose structure is broken (truncated, overwritten, not TFLite at all): no
    interpreter can load it."""


class _Broken(Exception):
    """Raised inside the walk; turned into one DamagedModel line naming the file."""


class _Walker:
    def __init__(self, buf, size: int):
        self.buf, self.size = buf, size

    def need(self, ok: bool, what: str) -> None:
        if not ok:
            raise _Broken(what)

    def u32(self, pos: int) -> int:
        if pos < 0 or pos + 4 > self.size:
            raise _Broken("an offset points past the end of the file")
        return _U32.unpack_from(self.buf, pos)[0]

    def table(self, pos: int, what: str, index: int | None = None) -> tuple[int, tuple[int, ...]]:
        """(position, field offsets) of a table after checking it and its vtable lie inside the file.
        ``what`` (and ``index``) name it in the error; the name is formatted only then."""
        buf, size = self.buf, self.size
        problem = None
        if pos % 4 or pos <= 0 or pos + 4 > size:
            problem = "table outside the file"
        else:
            vtable = pos - _I32.unpack_from(buf, pos)[0]
            if vtable % 2 or vtable < 0 or vtable + 4 > size:
                problem = "vtable outside the file"
            else:
                vt_bytes, table_bytes = _U16x2.unpack_from(buf, vtable)
                if (vt_bytes < 4 or vt_bytes % 2 or vtable + vt_bytes > size or table_bytes < 4
                        or pos + table_bytes > size):
                    problem = "table runs past the end of the file"
                else:
                    offsets = struct.unpack_from(f"<{vt_bytes // 2 - 2}H", buf, vtable + 4)
                    if not offsets or max(offsets) < table_bytes:
                        return pos, offsets
                    problem = "a field lies outside its table"
        raise _Broken(f"{what}{'' if index is None else f' {index}'}: {problem}")

    @staticmethod
    def field(table: tuple[int, tuple[int, ...]], number: int) -> int:
        pos, offsets = table
        return pos + offsets[number] if number < len(offsets) and offsets[number] else 0

    def scalar(self, table, number: int, fmt: struct.Struct, default: int = 0) -> int:
        at = self.field(table, number)
        if not at:
            return default
        self.need(at + fmt.size <= self.size, "a field runs past the end of the file")
        return fmt.unpack_from(self.buf, at)[0]

    def vector(self, table, number: int, element_bytes: int, what: str) -> tuple[int, int]:
        """(first element, length) of a vector field; (0, 0) when absent."""
        pos, offsets = table
        if number >= len(offsets) or not offsets[number]:
            return 0, 0
        at, buf, size = pos + offsets[number], self.buf, self.size
        if at + 4 > size:
            raise _Broken(f"{what}: an offset points past the end of the file")
        start = at + _U32.unpack_from(buf, at)[0]
        if start + 4 > size:
            raise _Broken(f"{what}: an offset points past the end of the file")
        length = _U32.unpack_from(buf, start)[0]
        # Strings (element_bytes 1) also hold a terminating zero.
        if start + 4 + length * element_bytes + (element_bytes == 1) > size:
            raise _Broken(f"{what}: a vector of {length} runs past the end of the file")
        return start + 4, length

    def ints(self, table, number: int, what: str, fmt: str = "i") -> tuple[int, ...]:
        start, length = self.vector(table, number, struct.calcsize(fmt), what)
        return struct.unpack_from(f"<{length}{fmt}", self.buf, start) if length else ()

    def tables(self, table, number: int, what: str) -> list[tuple[int, tuple[int, ...]]]:
        start, length = self.vector(table, number, 4, what)
        return [self.table(e + self.u32(e), what, i) for i, e in enumerate(range(start, start + 4 * length, 4))]

    def string(self, table, number: int, what: str) -> None:
        self.vector(table, number, 1, what)


def check_tflite(path: str | os.PathLike) -> None:
    """Raise DamagedModel (one line) when ``path`` is not a structurally sound TFLite file."""
    path = Path(path)
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < 8:
            raise DamagedModel(f"{path}: cannot load it: not a TFLite model ({size} bytes; damaged or truncated?)")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if buf[4:8] != _IDENTIFIER:
                raise DamagedModel(f"{path}: cannot load it: not a TFLite model (identifier {bytes(buf[4:8])!r}, "
                                   f"expected {_IDENTIFIER!r}; damaged, or another format with a .tflite name?)")
            try:
                _walk(_Walker(buf, size))
            except _Broken as exc:
                raise DamagedModel(f"{path}: cannot load it: damaged TFLite file ({exc}); "
                                   "convert it again or copy it again") from None


def _walk(w: _Walker) -> None:
    model = w.table(w.u32(0), "model")
    version = w.scalar(model, 0, _U32)
    w.need(version == _SCHEMA_VERSION, f"schema version {version}, expected {_SCHEMA_VERSION}")
    codes = w.tables(model, 1, "operator code")
    for code in codes:
        w.string(code, 1, "custom op name")
    buffers = w.tables(model, 4, "buffer")
    for i, buffer in enumerate(buffers):
        w.vector(buffer, 0, 1, "buffer")
        offset, size = w.scalar(buffer, 1, _I64), w.scalar(buffer, 2, _I64)
        if offset > 1 and (size < 0 or offset + size > w.size):  # weights stored after the flatbuffer (> 2 GB)
            raise _Broken(f"buffer {i}: stored at {offset}+{size}, outside the file")
    subgraphs = w.tables(model, 2, "subgraph")
    tensor_counts = [_subgraph(w, g, i, len(codes), buffers) for i, g in enumerate(subgraphs)]
    w.string(model, 3, "description")
    for index in w.ints(model, 5, "metadata buffers"):
        w.need(0 <= index < len(buffers), f"metadata buffer {index} of {len(buffers)}")
    for meta in w.tables(model, 6, "metadata"):
        w.string(meta, 0, "metadata name")
        w.need(w.scalar(meta, 1, _U32) < max(len(buffers), 1), "metadata points at a missing buffer")
    for signature in w.tables(model, 7, "signature"):
        graph = w.scalar(signature, 4, _U32)
        w.string(signature, 2, "signature key")
        w.need(graph < len(subgraphs), f"signature of subgraph {graph}, the model has {len(subgraphs)}")
        for tensor_map in w.tables(signature, 0, "signature input") + w.tables(signature, 1, "signature output"):
            w.string(tensor_map, 0, "signature tensor name")
            w.need(w.scalar(tensor_map, 1, _U32) < tensor_counts[graph], "signature names a missing tensor")


def _subgraph(w: _Walker, graph, index: int, n_codes: int, buffers) -> int:
    where = f"subgraph {index}"
    tensors = w.tables(graph, 0, f"{where} tensor")
    for t, tensor in enumerate(tensors):
        _tensor(w, tensor, f"{where} tensor {t}", buffers)
    n = len(tensors)
    for i in w.ints(graph, 1, f"{where} inputs") + w.ints(graph, 2, f"{where} outputs"):
        if not 0 <= i < n:
            raise _Broken(f"{where}: input/output tensor {i} of {n}")
    for o, op in enumerate(w.tables(graph, 3, f"{where} operator")):
        what = f"{where} operator {o}"
        if w.scalar(op, 0, _U32) >= n_codes:
            raise _Broken(f"{what}: operator code out of range")
        for i in w.ints(op, 1, what) + w.ints(op, 2, what) + w.ints(op, 8, what):
            if not -1 <= i < n:
                raise _Broken(f"{what}: tensor {i} of {n}")
        kind = w.scalar(op, 3, _U8)
        if w.field(op, 4):
            options = w.table(w.field(op, 4) + w.u32(w.field(op, 4)), f"{what} options")
            for number, element in _OPTION_VECTORS.get(kind, ()):
                w.vector(options, number, element, f"{what} options")
        if w.field(op, 12):
            w.table(w.field(op, 12) + w.u32(w.field(op, 12)), f"{what} options")
        w.vector(op, 5, 1, f"{what} custom options")
        w.vector(op, 7, 1, what)
    w.string(graph, 4, f"{where} name")
    return n


def _tensor(w: _Walker, tensor, what: str, buffers) -> None:
    shape = w.ints(tensor, 0, what)
    if min(shape, default=0) < 0:
        raise _Broken(f"{what}: negative dimension in {list(shape)}")
    if min(w.ints(tensor, 7, what), default=0) < -1:
        raise _Broken(f"{what}: bad shape signature")
    kind = w.scalar(tensor, 1, _I8)
    if not 0 <= kind < len(_ELEMENT_BYTES):
        raise _Broken(f"{what}: unknown tensor type {kind}")
    buffer = w.scalar(tensor, 2, _U32)
    if buffer >= max(len(buffers), 1):
        raise _Broken(f"{what}: buffer {buffer} of {len(buffers)}")
    w.string(tensor, 3, what)
    sparse = w.field(tensor, 6)
    if sparse:
        w.table(sparse + w.u32(sparse), f"{what} sparsity")
    quantization = w.field(tensor, 4)
    if quantization:  # the interpreters read its scales and zero points (min and max they do not)
        quant = w.table(quantization + w.u32(quantization), f"{what} quantization")
        _, scales = w.vector(quant, 2, 4, what)
        _, zero_points = w.vector(quant, 3, 8, what)
        if scales > 1:
            axis = w.scalar(quant, 6, _I32)
            if not (zero_points in (0, scales) and 0 <= axis < len(shape) and shape[axis] == scales):
                raise _Broken(f"{what}: {scales} scales do not match dimension {axis} of {list(shape)}")
    if buffers and buffer and not sparse and _ELEMENT_BYTES[kind]:
        _, stored = w.vector(buffers[buffer], 0, 1, what)
        if stored:
            needed = math.prod(shape) * _ELEMENT_BYTES[kind]
            if stored != needed:
                raise _Broken(f"{what}: {stored} bytes stored, its shape {list(shape)} needs {needed}")
