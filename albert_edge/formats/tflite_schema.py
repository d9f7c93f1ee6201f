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

from .flatbuffer import Table as _Table

__all__ = ["Model", "TensorType", "BuiltinOperator", "WhileOptions"]


class TensorType:
    FLOAT32, FLOAT16, INT32, UINT8, INT64, STRING, BOOL, INT16, COMPLEX64, INT8 = range(10)
    FLOAT64, COMPLEX128, UINT64, RESOURCE, VARIANT, UINT32, UINT16, INT4, BFLOAT16 = range(10, 19)


def _builtin_operators() -> type:
    from .tflite_operators import RUNTIME_VERSIONS

    codes = {name: code for name, (code, _) in RUNTIME_VERSIONS.items()}
    codes.update(CONCAT_EMBEDDINGS=29, CALL=31, CUSTOM=32, DELEGATE=51, PLACEHOLDER_FOR_GREATER_OP_CODES=127)
    return type("BuiltinOperator", (), codes)


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


class _Union:
    """What a union field's accessor returns in the generated bindings: the buffer and the position
    of the table it points at, for the option type's ``Init``."""

    def __init__(self, buf: bytes, pos: int):
        self.Bytes, self.Pos = buf, pos


class Operator(_Table):
    def OpcodeIndex(self) -> int:
        return self._scalar(0, "<I")

    def InputsAsNumpy(self):
        return self._numpy(1, np.int32)

    def OutputsAsNumpy(self):
        return self._numpy(2, np.int32)

    def BuiltinOptionsType(self) -> int:
        return self._scalar(3, "<B")

    def BuiltinOptions(self) -> _Union | None:
        at = self._target(4)
        return _Union(self._buf, at) if at else None


class WhileOptions(_Table):
    """A WHILE operator's options (``BuiltinOptions`` read with ``Init``, as the bindings do)."""

    def __init__(self):  # empty until Init, as in the bindings
        pass

    def Init(self, buf: bytes, pos: int) -> None:
        super().__init__(buf, pos)

    def CondSubgraphIndex(self) -> int:
        return self._scalar(0, "<i")

    def BodySubgraphIndex(self) -> int:
        return self._scalar(1, "<i")


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

    def DataLength(self) -> int:
        return self._length(0, 1)

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
