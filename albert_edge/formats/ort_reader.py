"""Read an ONNX Runtime .ort file back (what ONNX Runtime Mobile loads): its inputs and
outputs, the operators it runs and every stored weight, initializers of subgraphs and tensor
attributes included. The .ort holds the graph as onnxruntime optimized it at conversion, so
this is where a weight that its optimizers copied (a constant-folded transpose per layer, a
packed copy) would show. Standard library and numpy only (:mod:`.ort_schema`); no onnxruntime.
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from pathlib import Path

import numpy as np

from .graph import GraphContents, StoredTensor, TensorSpec
from .ort_schema import DIM_PARAM, DIM_VALUE, FILE_IDENTIFIER, STRING, TENSOR_TYPES, Graph, InferenceSession

__all__ = ["read", "read_session", "DEFAULT_DOMAIN"]

DEFAULT_DOMAIN = "ai.onnx"  # the ONNX domain, written "" in a file


def read_session(path: str | os.PathLike) -> tuple[InferenceSession, bytes]:
    """The root table of the .ort file at ``path`` and the file's bytes; ValueError when it
    does not start like one."""
    path = Path(path)
    buf = path.read_bytes()
    if len(buf) < 8 or buf[4:8] != FILE_IDENTIFIER:
        got = buf[4:8] if len(buf) >= 8 else b""
        raise ValueError(f"{path} is not an ONNX Runtime .ort model (no {FILE_IDENTIFIER.decode()} identifier"
                         f"{f'; found {got!r}' if got else ''})")
    try:
        return InferenceSession.from_bytes(buf), buf
    except (IndexError, ValueError, struct.error) as exc:
        raise ValueError(f"{path} is a damaged .ort model ({type(exc).__name__}: {exc})") from None


def read(path: str | os.PathLike) -> GraphContents:
    """What the .ort file at ``path`` holds. Raises ValueError if it is not a readable .ort."""
    session, buf = read_session(path)
    try:
        return _read(session, buf)
    except (IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError, struct.error) as exc:
        # Flatbuffer accessors read lazily: a damaged file fails wherever it is first touched.
        raise ValueError(f"{path} is a damaged .ort model ({type(exc).__name__}: {exc})") from None


def _str(value: bytes | None) -> str:
    return value.decode("utf-8") if value else ""


def _read(session: InferenceSession, buf: bytes) -> GraphContents:
    model = session.model()
    graph = model.graph() if model is not None else None
    if graph is None:
        raise ValueError("no model graph")
    graphs = _graphs(graph)
    weights = [w for g in graphs for w in _initializers(g, buf)]
    stored = {w.name for w in weights}
    specs = {_str(v.name()): v for v in graph.node_args()}
    inputs = [_spec(name, specs.get(name)) for name in map(_str, graph.inputs()) if name not in stored]
    outputs = [_spec(name, specs.get(name)) for name in map(_str, graph.outputs())]
    if not graph.nodes() and not outputs:
        raise ValueError("an empty graph")
    ops: Counter = Counter()
    consumers: dict[str, list[str]] = {}
    for g in graphs:
        for node in g.nodes():
            op = _str(node.op_type())
            ops[op] += 1
            for name in map(_str, node.inputs()):
                readers = consumers.setdefault(name, [])
                if op not in readers:
                    readers.append(op)
            for attr in node.attributes():
                weights += [_tensor(t, buf, f"{_str(node.name())}.{_str(attr.name())}")
                            for t in ([attr.t()] if attr.t() is not None else []) + attr.tensors()]
    weights = [StoredTensor(w.name, w.data, tuple(consumers.get(w.name, ()))) for w in weights]
    opsets = {(_str(o.domain()) or DEFAULT_DOMAIN): int(o.version()) for o in model.opset_import()}
    metadata = {
        "ort_format_version": _str(session.ort_version()),
        "opset": opsets.get(DEFAULT_DOMAIN),
        "opsets": opsets,
        "ir_version": int(model.ir_version()),
        "producer": f"{_str(model.producer_name())} {_str(model.producer_version())}".strip(),
        "runtime_optimizations": graph.has_runtime_optimizations(),
        "kernel_type_str_resolver": session.has_kernel_type_str_resolver(),
        "nodes": sum(ops.values()),
        **{_str(p.key()): _str(p.value()) for p in model.metadata_props()},
    }
    return GraphContents(format="ort", inputs=inputs, outputs=outputs, ops=ops, weights=weights, metadata=metadata)


def _graphs(graph: Graph) -> list[Graph]:
    """The main graph and every subgraph under it."""
    out, todo = [], [graph]
    while todo:
        g = todo.pop()
        out.append(g)
        todo += g.subgraphs()
    return out


def _initializers(graph: Graph, buf: bytes) -> list[StoredTensor]:
    out = [_tensor(t, buf) for t in graph.initializers()]
    for sparse in graph.sparse_initializers():
        for part, tensor in (("values", sparse.values()), ("indices", sparse.indices())):
            if tensor is not None:
                out.append(_tensor(tensor, buf, f"{_str(tensor.name())}.{part}"))
    return out


def _tensor(tensor, buf: bytes, name: str | None = None) -> StoredTensor:
    """One stored tensor, its values viewed in the file's bytes (not copied)."""
    name = name or _str(tensor.name())
    if tensor.external_data_offset() >= 0:
        raise ValueError(f"{name} is kept in a separate data file, which albert-edge does not write")
    dims = tensor.dims()
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if tensor.data_type() == STRING:  # counted as the bytes of its strings
        data = np.frombuffer(b"".join(tensor.string_data()), dtype=np.uint8)
        return StoredTensor(name, data)
    dtype = TENSOR_TYPES.get(tensor.data_type())
    if dtype is None:
        raise ValueError(f"{name} has unknown data type {tensor.data_type()}")
    span = tensor.raw_data()
    start, size = span if span else (0, 0)
    if size != count * dtype.itemsize:
        raise ValueError(f"{name} holds {size} bytes; its shape {list(dims)} of {dtype.name} needs "
                         f"{count * dtype.itemsize}")
    data = np.frombuffer(buf, dtype=dtype.newbyteorder("<"), count=count, offset=start).reshape(dims)
    return StoredTensor(name, data)


def _spec(name: str, info) -> TensorSpec:
    kind = info.type().tensor_type() if info is not None and info.type() is not None else None
    if kind is None:
        return TensorSpec(name=name, dtype="unknown", shape=())
    dtype = TENSOR_TYPES.get(kind.elem_type())
    shape: list[int | str] = []
    for dim in (kind.shape().dims() if kind.shape() is not None else []):
        value = dim.value()
        if value is not None and value.dim_type() == DIM_VALUE:
            shape.append(int(value.dim_value()))
        elif value is not None and value.dim_type() == DIM_PARAM:
            shape.append(_str(value.dim_param()) or -1)
        else:
            shape.append(-1)
    return TensorSpec(name=name, dtype=dtype.name if dtype is not None else "unknown", shape=tuple(shape))
