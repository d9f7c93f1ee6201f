"""The part of TFLite's flatbuffer schema that albert-edge reads, in the standard library.

A stand-in for ``schema_py_generated`` (which ai-edge-litert ships and tflite-runtime does not):
the same class and method names, for the tables and fields the readers use, so
``tflite_reader`` and ``op_versions`` run on a device that has only tflite-runtime and numpy.
Field numbers are those of TFLite's ``schema.fbs``; the test suite checks them, and every value
read, against the generated bindings.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["Model", "TensorType", "BuiltinOperator"]


class TensorType:
    FLOAT32, FLOAT16, INT32, UINT8, INT64, STRING, BOOL, INT16, COMPLEX64, INT8 = range(10)
    FLOAT64, COMPLEX128, UINT64, RESOURCE, VARIANT, UINT32, UINT16, INT4, BFLOAT16 = range(10, 19)


def _builtin_operators() -> type:
    from .tflite_operators import RUNTIME_VERSIONS

    codes = {name: code for name, (code, _) in RUNTIME_VERSIONS.items()}
    codes.update(CONCAT_EMBEDDINGS=29, CALL=31, CUSTOM=32, DELEGATE=51, PLACEHOLDER_FOR_GREATER_OP_CODES=127)
    return type("BuiltinOperator", (), codes)


class _Table:
    """A flatbuffer table at ``pos`` of ``buf``: reads its fields by number."""

    def __init__(self, buf: bytes, pos: int):
        self._buf, self._pos = buf, pos

    def _at(self, field: int) -> int:
        """Where ``field`` is stored, or 0 when it is absent (holds its default)."""
        vtable = self._pos - struct.unpack_from("<i", self._buf, self._pos)[0]
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
        return at + struct.unpack_from("<I", self._buf, at)[0] if at else 0

    def _length(self, field: int) -> int:
        vector = self._target(field)
        return struct.unpack_from("<I", self._buf, vector)[0] if vector else 0

    def _table(self, field: int, index: int, cls):
        vector = self._target(field)
        if not vector:
            return None
        if not 0 <= index < struct.unpack_from("<I", self._buf, vector)[0]:
            raise IndexError(f"element {index} of a vector of {struct.unpack_from('<I', self._buf, vector)[0]}")
        element = vector + 4 + 4 * index
        return cls(self._buf, element + struct.unpack_from("<I", self._buf, element)[0])

    def _string(self, field: int) -> bytes | None:
        at = self._target(field)
        if not at:
            return None
        size = struct.unpack_from("<I", self._buf, at)[0]
        if at + 4 + size > len(self._buf):
            raise IndexError("a string runs past the end of the file")
        return bytes(self._buf[at + 4:at + 4 + size])

    def _numpy(self, field: int, dtype) -> np.ndarray | int:
        """A vector of scalars as numpy (0 when absent, as the generated bindings return)."""
        at = self._target(field)
        if not at:
            return 0
        return np.frombuffer(self._buf, dtype=np.dtype(dtype).newbyteorder("<"),
                             count=struct.unpack_from("<I", self._buf, at)[0], offset=at + 4)


def _vector_of(field: int, cls: type) -> tuple:
    """The two accessors of a vector-of-tables field, as the generated bindings name them:
    ``Xs(i)`` (element ``i``, None when the field is absent) and ``XsLength()``."""
    def element(self, i: int):
        return self._table(field, i, cls)

    def length(self) -> int:
        return self._length(field)

    return element, length


class OperatorCode(_Table):
    def DeprecatedBuiltinCode(self) -> int:
        return self._scalar(0, "<b")

    def CustomCode(self) -> bytes | None:
        return self._string(1)

    def Version(self) -> int:
        return self._scalar(2, "<i", 1)

    def BuiltinCode(self) -> int:
        return self._scalar(3, "<i")


class Tensor(_Table):
    def ShapeAsNumpy(self):
        return self._numpy(0, np.int32)

    def Type(self) -> int:
        return self._scalar(1, "<b")

    def Buffer(self) -> int:
        return self._scalar(2, "<I")

    def Name(self) -> bytes | None:
        return self._string(3)

    def ShapeSignatureAsNumpy(self):
        return self._numpy(7, np.int32)

    def ShapeSignatureIsNone(self) -> bool:
        return self._at(7) == 0


class Operator(_Table):
    def OpcodeIndex(self) -> int:
        return self._scalar(0, "<I")

    def InputsAsNumpy(self):
        return self._numpy(1, np.int32)

    def OutputsAsNumpy(self):
        return self._numpy(2, np.int32)


class SubGraph(_Table):
    Tensors, TensorsLength = _vector_of(0, Tensor)

    def InputsAsNumpy(self):
        return self._numpy(1, np.int32)

    def OutputsAsNumpy(self):
        return self._numpy(2, np.int32)

    Operators, OperatorsLength = _vector_of(3, Operator)


class Buffer(_Table):
    def DataAsNumpy(self):
        return self._numpy(0, np.uint8)

    def Offset(self) -> int:
        return self._scalar(1, "<Q")

    def Size(self) -> int:
        return self._scalar(2, "<Q")


class Metadata(_Table):
    def Name(self) -> bytes | None:
        return self._string(0)

    def Buffer(self) -> int:
        return self._scalar(1, "<I")


class TensorMap(_Table):
    def Name(self) -> bytes | None:
        return self._string(0)

    def TensorIndex(self) -> int:
        return self._scalar(1, "<I")


class SignatureDef(_Table):
    Inputs, InputsLength = _vector_of(0, TensorMap)
    Outputs, OutputsLength = _vector_of(1, TensorMap)

    def SignatureKey(self) -> bytes | None:
        return self._string(2)

    def SubgraphIndex(self) -> int:
        return self._scalar(4, "<I")


class Model(_Table):
    @classmethod
    def GetRootAs(cls, buf, offset: int = 0) -> Model:
        buf = bytes(buf)
        return cls(buf, offset + struct.unpack_from("<I", buf, offset)[0])

    def Version(self) -> int:
        return self._scalar(0, "<I")

    OperatorCodes, OperatorCodesLength = _vector_of(1, OperatorCode)
    Subgraphs, SubgraphsLength = _vector_of(2, SubGraph)

    def Description(self) -> bytes | None:
        return self._string(3)

    Buffers, BuffersLength = _vector_of(4, Buffer)
    Metadata, MetadataLength = _vector_of(6, Metadata)
    SignatureDefs, SignatureDefsLength = _vector_of(7, SignatureDef)


BuiltinOperator = _builtin_operators()
