"""The part of ExecuTorch's .pte flatbuffer schemas that albert-edge reads, in the standard
library and numpy: ``Program`` (executorch/schema/program.fbs, identifier "ET12") and the
XNNPACK delegate's ``XNNGraph`` (executorch/backends/xnnpack/serialization/schema.fbs, "XN01").

Field numbers follow those schemas (a union takes two: its type, then its value); the test suite
checks the values read here against executorch's own deserializer. No executorch import: a
device reads .pte files with this alone.
"""

from __future__ import annotations

import struct

import numpy as np

from . import identifiers
from .flatbuffer import Table, root

__all__ = ["Program", "XNNGraph", "ExtendedHeader", "XNNHeader", "SCALAR_TYPES", "XNN_DATATYPES",
           "XNN_NODES", "FILE_IDENTIFIER"]

FILE_IDENTIFIER = identifiers.EXECUTORCH.magic  # b"ET12"

# ScalarType (executorch/schema/scalar_type.fbs) -> numpy dtype; types numpy lacks read as raw
# unsigned integers of their width (bfloat16 as uint16, float8 as uint8).
SCALAR_TYPES: dict[int, np.dtype] = {
    0: np.dtype(np.uint8), 1: np.dtype(np.int8), 2: np.dtype(np.int16), 3: np.dtype(np.int32),
    4: np.dtype(np.int64), 5: np.dtype(np.float16), 6: np.dtype(np.float32), 7: np.dtype(np.float64),
    11: np.dtype(np.bool_), 12: np.dtype(np.int8), 13: np.dtype(np.uint8), 14: np.dtype(np.int32),
    15: np.dtype(np.uint16), 16: np.dtype(np.uint8), 17: np.dtype(np.uint8), 22: np.dtype(np.uint16),
    23: np.dtype(np.uint8), 24: np.dtype(np.uint8), 25: np.dtype(np.uint8), 26: np.dtype(np.uint8),
    27: np.dtype(np.uint16), 28: np.dtype(np.uint32), 29: np.dtype(np.uint64),
}

# XNNDatatype -> numpy dtype (int4 kinds are packed two to a byte: raw uint8).
XNN_DATATYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.float16), 3: np.dtype(np.int8), 4: np.dtype(np.uint8),
    5: np.dtype(np.int32), 6: np.dtype(np.int8), 7: np.dtype(np.int32), 8: np.dtype(np.uint8),
    9: np.dtype(np.int8), 10: np.dtype(np.uint8), 11: np.dtype(np.int8), 12: np.dtype(np.int32),
    13: np.dtype(np.float32), 14: np.dtype(np.uint16),
}

# XNodeUnion, in schema order (union type codes start at 1).
XNN_NODES = (
    "Add FullyConnected Softmax Sigmoid StaticTranspose Clamp Conv2d Div StaticResizeBilinear2D "
    "StaticConstantPad AvgPooling2d Minimum DepthwiseConv2d MaxPooling2d Multiply Subtract Floor Convert "
    "GlobalAvgPooling2d StaticReshape ArgMaxPooling2d SquareRoot Ceiling Hardswish LeakyReLU Maximum Negate "
    "Square ELU Abs PReLU Concatenate2 Concatenate3 Concatenate4 StaticSlice ScaledDotProductAttention "
    "BatchMatrixMultiply Concatenate5 ConvTranspose2d ReciprocalSquareRoot Log Gelu Tanh Exp Sin Copy Cos"
).split()

# Union type codes of the Program schema.
EVALUE_TENSOR = 5  # KernelTypes: Null=1, Int, Bool, Double, Tensor, String, IntList, ...
INSTRUCTION_KERNEL, INSTRUCTION_DELEGATE = 1, 2  # InstructionArguments
DATA_INLINE, DATA_SEGMENT = 0, 1  # DataLocation
SHAPE_DYNAMISM = ("static", "dynamic bound", "dynamic unbound")


class ExtendedHeader:
    """The "eh00" header after the flatbuffer's root offset and identifier: where the program
    flatbuffer ends and the segments (weights, delegate payloads) begin."""

    MAGIC = b"eh00"
    AT = 8

    def __init__(self, raw: bytes):
        if raw[self.AT:self.AT + 4] != self.MAGIC:
            raise ValueError("no eh00 extended header")
        length = struct.unpack_from("<I", raw, self.AT + 4)[0]
        if length < 24:
            raise ValueError(f"an extended header of {length} bytes (at least 24)")
        self.program_size, self.segment_base_offset = struct.unpack_from("<QQ", raw, self.AT + 8)
        self.segment_data_size = struct.unpack_from("<Q", raw, self.AT + 24)[0] if length >= 32 else 0


class XNNHeader:
    """The "XH00" header of an XNNPACK delegate payload: where its flatbuffer and its own
    constant data are."""

    MAGIC = b"XH00"

    def __init__(self, payload: bytes):
        if payload[4:8] != self.MAGIC:
            raise ValueError("an XNNPACK payload without its XH00 header")
        self.flatbuffer_offset, self.flatbuffer_size, self.constant_data_offset = struct.unpack_from(
            "<III", payload, 10)
        self.constant_data_size = struct.unpack_from("<Q", payload, 22)[0]
        end = max(self.flatbuffer_offset + self.flatbuffer_size, self.constant_data_offset + self.constant_data_size)
        if end > len(payload):
            raise ValueError(f"an XNNPACK payload of {len(payload)} bytes whose header points to byte {end}")


def _tables(field: int, cls: type):
    """Accessors of a vector-of-tables field: ``xs()`` lists them all."""
    def all_of(self) -> list:
        return [self._table(field, i, cls) for i in range(self._length(field))]

    return all_of


# -- Program -------------------------------------------------------------------------------------

class AllocationDetails(Table):
    def memory_id(self) -> int:
        return self._scalar(0, "<I")


class ExtraTensorInfo(Table):
    def fully_qualified_name(self) -> bytes | None:
        return self._string(1)

    def location(self) -> int:  # TensorDataLocation: SEGMENT = 0, EXTERNAL = 1
        return self._scalar(2, "<b")


class Tensor(Table):
    def scalar_type(self) -> int:
        return self._scalar(0, "<b")

    def sizes(self) -> tuple[int, ...]:
        sizes = self._numpy(2, np.int32)
        return () if isinstance(sizes, int) else tuple(int(s) for s in sizes)

    def data_buffer_idx(self) -> int:
        return self._scalar(5, "<I")

    def allocation_info(self) -> AllocationDetails | None:
        return self._child(6, AllocationDetails)

    def shape_dynamism(self) -> int:
        return self._scalar(8, "<b")

    def extra_tensor_info(self) -> ExtraTensorInfo | None:
        return self._child(9, ExtraTensorInfo)


class EValue(Table):
    def val_type(self) -> int:
        return self._scalar(0, "<B")

    def tensor(self) -> Tensor | None:
        return self._child(1, Tensor) if self.val_type() == EVALUE_TENSOR else None


class Operator(Table):
    def name(self) -> bytes | None:
        return self._string(0)

    def overload(self) -> bytes | None:
        return self._string(1)


class KernelCall(Table):
    def op_index(self) -> int:
        return self._scalar(0, "<i")


class DelegateCall(Table):
    def delegate_index(self) -> int:
        return self._scalar(0, "<i")


class Instruction(Table):
    def args_type(self) -> int:
        return self._scalar(0, "<B")

    def kernel_call(self) -> KernelCall | None:
        return self._child(1, KernelCall) if self.args_type() == INSTRUCTION_KERNEL else None

    def delegate_call(self) -> DelegateCall | None:
        return self._child(1, DelegateCall) if self.args_type() == INSTRUCTION_DELEGATE else None


class Chain(Table):
    instructions = _tables(2, Instruction)


class DataReference(Table):
    def location(self) -> int:
        return self._scalar(0, "<b")

    def index(self) -> int:
        return self._scalar(1, "<I")


class BackendDelegate(Table):
    def id(self) -> bytes | None:
        return self._string(0)

    def processed(self) -> DataReference | None:
        return self._child(1, DataReference)


class ContainerMetadata(Table):
    def encoded_inp_str(self) -> bytes | None:
        return self._string(0)

    def encoded_out_str(self) -> bytes | None:
        return self._string(1)


class ExecutionPlan(Table):
    def name(self) -> bytes | None:
        return self._string(0)

    def container_meta_type(self) -> ContainerMetadata | None:
        return self._child(1, ContainerMetadata)

    def values_length(self) -> int:
        return self._length(2)

    def value(self, i: int) -> EValue:
        return self._table(2, i, EValue)

    def inputs(self) -> list[int]:
        ids = self._numpy(3, np.int32)
        return [] if isinstance(ids, int) else [int(i) for i in ids]

    def outputs(self) -> list[int]:
        ids = self._numpy(4, np.int32)
        return [] if isinstance(ids, int) else [int(i) for i in ids]

    chains = _tables(5, Chain)
    operators = _tables(6, Operator)
    delegates = _tables(7, BackendDelegate)

    def non_const_buffer_sizes(self) -> list[int]:
        """Bytes of each memory-planned arena (index 0 is reserved); sized for the inputs'
        upper bounds, allocated when the method loads."""
        sizes = self._numpy(8, np.int64)
        return [] if isinstance(sizes, int) else [int(s) for s in sizes]


class Buffer(Table):
    def storage(self) -> tuple[int, int] | None:
        return self._bytes_span(0)


class InlineData(Table):
    def data(self) -> tuple[int, int] | None:
        return self._bytes_span(0)


class DataSegment(Table):
    def offset(self) -> int:
        return self._scalar(0, "<Q")

    def size(self) -> int:
        return self._scalar(1, "<Q")


class SubsegmentOffsets(Table):
    def segment_index(self) -> int:
        return self._scalar(0, "<I")

    def offsets(self) -> list[int]:
        offsets = self._numpy(1, np.uint64)
        return [] if isinstance(offsets, int) else [int(o) for o in offsets]


class NamedData(Table):
    def key(self) -> bytes | None:
        return self._string(0)

    def segment_index(self) -> int:
        return self._scalar(1, "<I")


class Program(Table):
    @classmethod
    def from_bytes(cls, raw: bytes) -> Program:
        return root(raw, cls)

    def version(self) -> int:
        return self._scalar(0, "<I")

    execution_plans = _tables(1, ExecutionPlan)
    constant_buffers = _tables(2, Buffer)
    backend_delegate_data = _tables(3, InlineData)
    segments = _tables(4, DataSegment)

    def constant_segment(self) -> SubsegmentOffsets | None:
        return self._child(5, SubsegmentOffsets)

    named_data = _tables(7, NamedData)


# -- the XNNPACK delegate's payload ----------------------------------------------------------------

class XNNTensorValue(Table):
    def datatype(self) -> int:
        return self._scalar(0, "<h")

    def dims(self) -> tuple[int, ...]:
        dims = self._numpy(2, np.uint32)
        return () if isinstance(dims, int) else tuple(int(d) for d in dims)

    def constant_buffer_idx(self) -> int:
        return self._scalar(3, "<I")


class PerChannelQuant(Table):
    def scale_buffer_idx(self) -> int:
        return self._scalar(2, "<I")

    def num_scales(self) -> int:
        return self._scalar(3, "<I")


class PerChannelGroupQuant(Table):
    def scale_buffer_idx(self) -> int:
        return self._scalar(4, "<I")

    def num_scales(self) -> int:
        return self._scalar(5, "<I")


class XNNQuantizedTensorValue(Table):
    def tensor_value(self) -> XNNTensorValue | None:
        return self._child(0, XNNTensorValue)

    def scales(self) -> tuple[int, int] | None:
        """(constant index, count) of per-channel scales stored as a constant (float32), if any."""
        kind = self._scalar(1, "<B")  # XNNQuantParams: PerChannelQuant = 1, ..., PerChannelGroupQuant = 4
        params = self._child(2, PerChannelQuant if kind == 1 else PerChannelGroupQuant) if kind in (1, 4) else None
        if params is None or not params.scale_buffer_idx():
            return None
        return params.scale_buffer_idx(), params.num_scales()


class XValue(Table):
    def quantized(self) -> XNNQuantizedTensorValue | None:
        return self._child(1, XNNQuantizedTensorValue) if self._scalar(0, "<B") == 2 else None

    def tensor_value(self) -> XNNTensorValue | None:
        kind = self._scalar(0, "<B")
        if kind == 1:
            return self._child(1, XNNTensorValue)
        if kind == 2:
            quantized = self._child(1, XNNQuantizedTensorValue)
            return quantized.tensor_value() if quantized is not None else None
        return None


class XNode(Table):
    def kind(self) -> int:
        return self._scalar(0, "<B")


class ConstantDataOffset(Table):
    def offset(self) -> int:
        return self._scalar(0, "<Q")

    def size(self) -> int:
        return self._scalar(1, "<Q")

    def named_key(self) -> bytes | None:
        return self._string(2)


class XNNGraph(Table):
    @classmethod
    def from_bytes(cls, raw: bytes, offset: int = 0) -> XNNGraph:
        return root(raw, cls, offset)

    def version(self) -> bytes | None:
        return self._string(0)

    xnodes = _tables(1, XNode)
    xvalues = _tables(2, XValue)
    constant_data = _tables(8, ConstantDataOffset)
