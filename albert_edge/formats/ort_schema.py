"""The part of ONNX Runtime's ORT format flatbuffer schema that albert-edge reads, in the
standard library and numpy: ``InferenceSession`` (onnxruntime/core/flatbuffers/schema/ort.fbs,
identifier "ORTM") down to each graph's nodes, value infos and initializers.

Field numbers follow that schema (a union takes two: its type, then its value); the test suite
checks what is read here against onnxruntime's own generated bindings. No onnxruntime import: a
device reads .ort files with this alone.
"""

from __future__ import annotations

import numpy as np

from . import identifiers
from .flatbuffer import Table, root

__all__ = ["InferenceSession", "Graph", "Node", "Tensor", "ValueInfo", "TENSOR_TYPES", "FILE_IDENTIFIER"]

FILE_IDENTIFIER = identifiers.ORT.magic  # b"ORTM"

# TensorDataType (ONNX's TensorProto.DataType numbering) -> numpy dtype; types numpy lacks read
# as raw unsigned integers of their width (bfloat16 as uint16, float8 as uint8). STRING (8) is
# kept in ``string_data`` and read apart.
TENSOR_TYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
    14: np.dtype(np.complex64), 15: np.dtype(np.complex128), 16: np.dtype(np.uint16),
    17: np.dtype(np.uint8), 18: np.dtype(np.uint8), 19: np.dtype(np.uint8), 20: np.dtype(np.uint8),
}
STRING = 8
TYPE_TENSOR = 1  # TypeInfoValue: tensor_type = 1, sequence_type, map_type
DIM_VALUE, DIM_PARAM = 1, 2  # DimensionValueType: UNKNOWN = 0, VALUE, PARAM


def _tables(field: int, cls: type):
    """Accessors of a vector-of-tables field: ``xs()`` lists them all."""
    def all_of(self) -> list:
        return [self._table(field, i, cls) for i in range(self._length(field))]

    return all_of


class Tensor(Table):
    def name(self) -> bytes | None:
        return self._string(0)

    def dims(self) -> tuple[int, ...]:
        dims = self._numpy(2, np.int64)
        return () if isinstance(dims, int) else tuple(int(d) for d in dims)

    def data_type(self) -> int:
        return self._scalar(3, "<i")

    def raw_data(self) -> tuple[int, int] | None:
        """(start, size) of the tensor's bytes within the buffer."""
        return self._bytes_span(4)

    def string_data(self) -> list[bytes]:
        return self._strings(5)

    def external_data_offset(self) -> int:
        """Where the bytes are in a separate data file; -1 (the default) when they are inline."""
        return self._scalar(6, "<q", -1)


class SparseTensor(Table):
    def values(self) -> Tensor | None:
        return self._child(0, Tensor)

    def indices(self) -> Tensor | None:
        return self._child(1, Tensor)


class DimensionValue(Table):
    def dim_type(self) -> int:
        return self._scalar(0, "<b")

    def dim_value(self) -> int:
        return self._scalar(1, "<q")

    def dim_param(self) -> bytes | None:
        return self._string(2)


class Dimension(Table):
    def value(self) -> DimensionValue | None:
        return self._child(0, DimensionValue)


class Shape(Table):
    dims = _tables(0, Dimension)


class TensorTypeAndShape(Table):
    def elem_type(self) -> int:
        return self._scalar(0, "<i")

    def shape(self) -> Shape | None:
        return self._child(1, Shape)


class TypeInfo(Table):
    def value_type(self) -> int:
        return self._scalar(1, "<B")

    def tensor_type(self) -> TensorTypeAndShape | None:
        return self._child(2, TensorTypeAndShape) if self.value_type() == TYPE_TENSOR else None


class ValueInfo(Table):
    def name(self) -> bytes | None:
        return self._string(0)

    def type(self) -> TypeInfo | None:
        return self._child(2, TypeInfo)


class Attribute(Table):
    def name(self) -> bytes | None:
        return self._string(0)

    def t(self) -> Tensor | None:
        return self._child(6, Tensor)

    def g(self) -> Graph | None:
        return self._child(7, Graph)

    tensors = _tables(11, Tensor)


class Node(Table):
    def name(self) -> bytes | None:
        return self._string(0)

    def domain(self) -> bytes | None:
        return self._string(2)

    def since_version(self) -> int:
        return self._scalar(3, "<i")

    def op_type(self) -> bytes | None:
        return self._string(5)

    def inputs(self) -> list[bytes]:
        return self._strings(8)

    def outputs(self) -> list[bytes]:
        return self._strings(9)

    attributes = _tables(10, Attribute)


class Graph(Table):
    initializers = _tables(0, Tensor)
    node_args = _tables(1, ValueInfo)
    nodes = _tables(2, Node)

    def inputs(self) -> list[bytes]:
        return self._strings(5)

    def outputs(self) -> list[bytes]:
        return self._strings(6)

    sparse_initializers = _tables(7, SparseTensor)

    def has_runtime_optimizations(self) -> bool:
        return bool(self._target(8))

    def subgraphs(self) -> list[Graph]:
        """The graphs held by node attributes (If and Loop bodies)."""
        return [g for node in self.nodes() for attr in node.attributes() if (g := attr.g()) is not None]


class OperatorSetId(Table):
    def domain(self) -> bytes | None:
        return self._string(0)

    def version(self) -> int:
        return self._scalar(1, "<q")


class StringStringEntry(Table):
    def key(self) -> bytes | None:
        return self._string(0)

    def value(self) -> bytes | None:
        return self._string(1)


class Model(Table):
    def ir_version(self) -> int:
        return self._scalar(0, "<q")

    opset_import = _tables(1, OperatorSetId)

    def producer_name(self) -> bytes | None:
        return self._string(2)

    def producer_version(self) -> bytes | None:
        return self._string(3)

    def graph(self) -> Graph | None:
        return self._child(7, Graph)

    metadata_props = _tables(9, StringStringEntry)


class InferenceSession(Table):
    def ort_version(self) -> bytes | None:
        return self._string(0)

    def model(self) -> Model | None:
        return self._child(1, Model)

    def has_kernel_type_str_resolver(self) -> bool:
        return bool(self._target(3))

    @classmethod
    def from_bytes(cls, buf: bytes) -> InferenceSession:
        if not identifiers.ORT.found(buf):
            raise ValueError(f"no {FILE_IDENTIFIER.decode()} identifier")
        return root(buf, cls)
