"""A .tflite flatbuffer as Python objects, read and written with the schema bindings that
ai-edge-litert ships (no tensorflow): the common ground of the TFLite checks and rewrites, with
the small readers they share (the builders the rewrites use are in albert_edge.quantize.tflite_edit)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from albert_edge.errors import RuntimeUnavailable, install_line

from .identifiers import TFLITE

__all__ = ["Model", "load", "pack", "DTYPES", "QUANTIZED", "op_inputs", "op_outputs", "is_quantized", "dequantized"]

DTYPES = {
    "FLOAT32": np.float32, "FLOAT16": np.float16, "INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16,
    "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_,
}


QUANTIZED = {"int8", "uint8", "int16"}


def _schema():
    try:
        from ai_edge_litert import schema_py_generated as schema
    except ImportError:
        raise RuntimeUnavailable(
            f"reading .tflite files needs ai-edge-litert ({install_line('tflite')})") from None
    return schema


def _names(enum_cls) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


@dataclass
class Model:
    """The unpacked model (``obj``, a schema ModelT) with lookups for the first subgraph."""

    obj: object
    raw: bytes
    schema: object

    @property
    def graph(self):
        return self.obj.subgraphs[0]

    def op_name(self, op) -> str:
        code = self.obj.operatorCodes[op.opcodeIndex]
        builtin = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
        return _names(self.schema.BuiltinOperator).get(builtin, f"BUILTIN_{builtin}")

    def dtype(self, tensor) -> np.dtype | None:
        name = _names(self.schema.TensorType).get(tensor.type, "")
        return np.dtype(DTYPES[name]) if name in DTYPES else None

    def type_code(self, dtype_name: str) -> int:
        return getattr(self.schema.TensorType, dtype_name)

    def constant(self, index: int, graph=None) -> np.ndarray | None:
        """The values of tensor ``index`` of ``graph`` (default: the first subgraph) if it is a
        constant (has buffer data)."""
        tensor = (graph or self.graph).tensors[index]
        data = self.buffer_bytes(tensor.buffer)
        dtype = self.dtype(tensor)
        if data is None or dtype is None or data.size % dtype.itemsize:
            return None
        values = data.view(dtype)
        shape = tuple(int(d) for d in (tensor.shape if tensor.shape is not None else ()))
        return values.reshape(shape) if int(np.prod(shape)) == values.size else values

    def buffer_bytes(self, index: int) -> np.ndarray | None:
        if index <= 0:
            return None
        buf = self.obj.buffers[index]
        if buf.offset and buf.offset > 1:
            return np.frombuffer(self.raw, dtype=np.uint8, count=int(buf.size), offset=int(buf.offset))
        if buf.data is None or len(buf.data) == 0:
            return None
        return np.asarray(buf.data, dtype=np.uint8)

    def producers(self, graph=None) -> dict[int, object]:
        """Tensor index -> the op that writes it, in ``graph`` (default: the first subgraph)."""
        return {int(t): op for op in (graph or self.graph).operators for t in (op.outputs if op.outputs is not None else ())}

    def consumers(self) -> dict[int, list]:
        out: dict[int, list] = {}
        for op in self.graph.operators:
            for t in op.inputs if op.inputs is not None else ():
                if t >= 0:
                    out.setdefault(int(t), []).append(op)
        return out

    def input_index(self, name: str) -> int | None:
        """The tensor of signature input ``name`` (the signature's key, or a tensor name that
        contains it)."""
        for sig in self.obj.signatureDefs or ():
            for entry in sig.inputs or ():
                if _text(entry.name) == name:
                    return int(entry.tensorIndex)
        for i in self.graph.inputs:
            if name in _text(self.graph.tensors[i].name):
                return int(i)
        return None


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def load(raw: bytes | bytearray) -> Model:
    schema = _schema()
    raw = bytes(raw)
    if not TFLITE.found(raw):
        raise ValueError("not a TFLite flatbuffer (no TFL3 identifier)")
    return Model(schema.ModelT.InitFromPackedBuf(raw, 0), raw, schema)


def pack(model: Model) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(max(1024, len(model.raw)))
    offset = model.obj.Pack(builder)
    builder.Finish(offset, file_identifier=b"TFL3")
    return bytes(builder.Output())


# -- small builders and readers for the rewrites ------------------------------------------------

def op_inputs(op) -> list[int]:
    return [int(i) for i in (op.inputs if op.inputs is not None else ())]


def op_outputs(op) -> list[int]:
    return [int(i) for i in (op.outputs if op.outputs is not None else ())]


def is_quantized(model: Model, t: int) -> bool:
    tensor = model.graph.tensors[t]
    dtype = model.dtype(tensor)
    q = tensor.quantization
    return dtype is not None and dtype.name in QUANTIZED and q is not None and q.scale is not None and len(q.scale) > 0


def dequantized(model: Model, t: int) -> np.ndarray:
    tensor = model.graph.tensors[t]
    q = tensor.quantization
    values = model.constant(t).astype(np.float64)
    scale = np.asarray(q.scale, dtype=np.float64)
    zero = np.asarray(q.zeroPoint if q.zeroPoint is not None and len(q.zeroPoint) else [0], dtype=np.float64)
    if scale.size > 1:
        shape = [1] * values.ndim
        shape[q.quantizedDimension] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape) if zero.size > 1 else zero
    return ((values - zero) * scale).astype(np.float32)
