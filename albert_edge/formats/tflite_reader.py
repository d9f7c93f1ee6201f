"""Read a .tflite file back: the serving signature, the op histogram and every stored constant
buffer, once each.

Uses the flatbuffer schema bindings that ai-edge-litert ships (``schema_py_generated``, on top
of the ``flatbuffers`` package it depends on), or where only tflite-runtime is installed (it
ships no bindings) their standard-library stand-in ``tflite_schema``: numpy and an interpreter,
no torch, no tensorflow.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections import Counter
from pathlib import Path

import numpy as np

from .graph import GraphContents, StoredTensor, TensorSpec
from .identifiers import TFLITE
from .tflite_metadata import read_metadata

__all__ = ["read", "SIGNATURE", "SETTING_SIGNATURE"]

SIGNATURE = "serving_default"
# An adaptive file's (convert --adaptive) second signature: exit_setting (a float scalar) in, the
# setting in effect out.
SETTING_SIGNATURE = "set_exit_setting"

# TensorType code -> numpy dtype. Types numpy cannot hold (int4, bfloat16, strings, ...) are
# read as raw bytes.
_DTYPES: dict[str, np.dtype] = {
    "FLOAT32": np.dtype(np.float32),
    "FLOAT16": np.dtype(np.float16),
    "FLOAT64": np.dtype(np.float64),
    "INT8": np.dtype(np.int8),
    "UINT8": np.dtype(np.uint8),
    "INT16": np.dtype(np.int16),
    "UINT16": np.dtype(np.uint16),
    "INT32": np.dtype(np.int32),
    "UINT32": np.dtype(np.uint32),
    "INT64": np.dtype(np.int64),
    "UINT64": np.dtype(np.uint64),
    "BOOL": np.dtype(np.bool_),
    "COMPLEX64": np.dtype(np.complex64),
    "COMPLEX128": np.dtype(np.complex128),
}
_RAW = np.dtype(np.uint8)


def schema_module():
    """ai-edge-litert's generated flatbuffer bindings, or the standard-library stand-in
    (``tflite_schema``) on a device that has only tflite-runtime."""
    try:
        from ai_edge_litert import schema_py_generated as schema
    except ImportError:
        from . import tflite_schema as schema
    return schema


def _enum_names(enum_cls) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


def _str(value: bytes | None) -> str:
    return value.decode("utf-8", "replace") if value else ""


def layer_form(path: str | os.PathLike) -> str:
    """How the .tflite at ``path`` writes its layers (``graph.LAYER_FORMS``): "loop" when it has
    a WHILE operator (``convert --layers loop``), else "unrolled". Reads the operator codes from
    the file mapped, not its weights."""
    schema = schema_module()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
        model = schema.Model.GetRootAs(view, 0)
        codes = (model.OperatorCodes(i) for i in range(model.OperatorCodesLength()))
        builtins = {max(code.BuiltinCode(), code.DeprecatedBuiltinCode()) for code in codes}
    return "loop" if schema.BuiltinOperator.WHILE in builtins else "unrolled"


def has_dynamic_tensor(path: str | os.PathLike) -> bool:
    """Whether any tensor of any graph of the .tflite at ``path`` has a dynamic size (-1 in its
    shape signature): a file whose inputs alone are fixed (a MediaPipe task file) still resizes; a
    ``convert --static`` file has none. The file is mapped, its weights never read."""
    schema = schema_module()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
        model = schema.Model.GetRootAs(view, 0)
        return any(_sized_at_run_time(model.Subgraphs(g).Tensors(t))
                   for g in range(model.SubgraphsLength()) for t in range(model.Subgraphs(g).TensorsLength()))


def _sized_at_run_time(tensor) -> bool:
    signature = tensor.ShapeSignatureAsNumpy()  # a view into the mapped file: gone when this returns
    return not isinstance(signature, int) and bool((signature < 0).any())


def read(path: str | os.PathLike) -> GraphContents:
    """What the .tflite file at ``path`` holds. Raises ValueError if it is not a TFLite model."""
    schema = schema_module()
    raw = Path(path).read_bytes()
    if not TFLITE.found(raw):
        raise ValueError(f"{path} is not a TFLite model (no TFL3 identifier)")
    try:
        return _read(schema, raw)
    except (struct.error, IndexError, ValueError, TypeError) as exc:
        # Flatbuffer accessors read lazily: a damaged file fails wherever it is first touched.
        raise ValueError(f"{path} is a damaged TFLite model ({type(exc).__name__}: {exc})") from None


def _read(schema, raw: bytes) -> GraphContents:
    model = schema.Model.GetRootAs(raw, 0)
    type_names = _enum_names(schema.TensorType)
    op_names = _enum_names(schema.BuiltinOperator)

    sig = _signature(model)
    sub = model.Subgraphs(sig.SubgraphIndex() if sig is not None else 0)

    def spec(name: str, index: int) -> TensorSpec:
        t = sub.Tensors(index)
        dims = t.ShapeSignatureAsNumpy() if not t.ShapeSignatureIsNone() else t.ShapeAsNumpy()
        dims = () if isinstance(dims, int) else tuple(int(d) for d in dims)
        dtype = _DTYPES.get(type_names.get(t.Type(), ""), _RAW).name
        return TensorSpec(name=name, dtype=dtype, shape=dims)

    if sig is not None:
        inputs = [spec(_str(m.Name()), m.TensorIndex()) for m in map(sig.Inputs, range(sig.InputsLength()))]
        # in the graph's order, which MediaPipe reads as its heads' (a MediaPipe adaptive file: class scores, passes)
        position = {int(t): k for k, t in enumerate(sub.OutputsAsNumpy())}
        named = sorted(map(sig.Outputs, range(sig.OutputsLength())), key=lambda m: position.get(m.TensorIndex(), 0))
        outputs = [spec(_str(m.Name()), m.TensorIndex()) for m in named]
    else:
        inputs = [spec(_str(sub.Tensors(int(i)).Name()), int(i)) for i in sub.InputsAsNumpy()]
        outputs = [spec(_str(sub.Tensors(int(i)).Name()), int(i)) for i in sub.OutputsAsNumpy()]

    code_names = [_op_name(model.OperatorCodes(i), op_names) for i in range(model.OperatorCodesLength())]
    ops: Counter = Counter()
    weights = _stored_tensors(model, raw, code_names, type_names, ops)
    metadata = {
        "schema_version": int(model.Version()),
        "description": _str(model.Description()),
        "signatures": [_str(model.SignatureDefs(i).SignatureKey()) for i in range(model.SignatureDefsLength())],
        "subgraphs": int(model.SubgraphsLength()),
        "buffers": int(model.BuffersLength()),
    }
    runtime = _metadata_string(model, raw, "min_runtime_version")
    if runtime:
        metadata["min_runtime_version"] = runtime
    task = read_metadata(raw)  # MediaPipe / Task Library metadata; ValueError when damaged
    if task is not None:
        metadata["task"] = task.to_dict()
    return GraphContents(format="tflite", inputs=inputs, outputs=outputs, ops=ops, weights=weights,
                         metadata=metadata)


def _signature(model):
    for i in range(model.SignatureDefsLength()):
        sig = model.SignatureDefs(i)
        if _str(sig.SignatureKey()) == SIGNATURE:
            return sig
    return model.SignatureDefs(0) if model.SignatureDefsLength() else None


def _op_name(code, op_names: dict[int, str]) -> str:
    # Older files store the builtin code in the int8 deprecated field, newer ones in both.
    builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
    if op_names.get(builtin) == "CUSTOM":
        return _str(code.CustomCode()) or "CUSTOM"
    return op_names.get(builtin, f"BUILTIN_{builtin}")


def _buffer_bytes(model, raw: bytes, index: int) -> np.ndarray | None:
    """The bytes of buffer ``index``: inline data, or (files over 2 GB) an offset into the file."""
    buf = model.Buffers(index)
    if buf is None:
        return None
    if buf.Offset() > 1:
        return np.frombuffer(raw, dtype=np.uint8, count=int(buf.Size()), offset=int(buf.Offset()))
    data = buf.DataAsNumpy()
    return None if isinstance(data, int) or data.size == 0 else data


def _stored_tensors(model, raw: bytes, code_names: list[str], type_names: dict[int, str],
                    ops: Counter) -> list[StoredTensor]:
    """Every buffer that holds data, once, named after the first tensor that points at it;
    fills ``ops`` with the op histogram on the way."""
    first: dict[int, tuple[str, str, tuple[int, ...]]] = {}  # buffer -> (name, type, shape)
    consumers: dict[int, list[str]] = {}
    for s in range(model.SubgraphsLength()):
        sub = model.Subgraphs(s)
        tensor_buffer = [int(sub.Tensors(i).Buffer()) for i in range(sub.TensorsLength())]
        for i in range(sub.TensorsLength()):
            b = tensor_buffer[i]
            if b > 0 and b not in first:
                t = sub.Tensors(i)
                shape = t.ShapeAsNumpy()
                shape = () if isinstance(shape, int) else tuple(int(d) for d in shape)
                first[b] = (_str(t.Name()), type_names.get(t.Type(), ""), shape)
        for o in range(sub.OperatorsLength()):
            op = sub.Operators(o)
            name = code_names[op.OpcodeIndex()]
            ops[name] += 1
            inputs = op.InputsAsNumpy()
            for i in () if isinstance(inputs, int) else inputs:
                if i >= 0 and tensor_buffer[i] > 0:
                    consumers.setdefault(tensor_buffer[i], [])
                    if name not in consumers[tensor_buffer[i]]:
                        consumers[tensor_buffer[i]].append(name)

    stored = []
    for b, (name, type_name, shape) in sorted(first.items()):
        data = _buffer_bytes(model, raw, b)
        if data is None:
            continue
        dtype = _DTYPES.get(type_name, _RAW)
        if data.size % dtype.itemsize == 0:
            values = data.view(dtype)
            if int(np.prod(shape, dtype=np.int64)) == values.size:
                values = values.reshape(shape)
        else:
            values = data
        stored.append(StoredTensor(name=name, data=values, consumers=tuple(consumers.get(b, ()))))
    return stored


def _metadata_string(model, raw: bytes, key: str) -> str:
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if _str(entry.Name()) == key:
            data = _buffer_bytes(model, raw, int(entry.Buffer()))
            return "" if data is None else bytes(data).split(b"\0", 1)[0].decode("utf-8", "replace")
    return ""
