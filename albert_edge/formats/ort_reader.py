"""Read an ONNX Runtime .ort file back (what ONNX Runtime Mobile loads): its inputs and
outputs, the operators it runs and every stored weight, initializers of subgraphs and tensor
attributes included. The .ort holds the graph as onnxruntime optimized it at conversion, so
this is where a weight that its optimizers copied (a constant-folded transpose per layer, a
packed copy) would show. Standard library and numpy only (:mod:`.ort_schema`); no onnxruntime.

:func:`check_ort` walks the same tables of a memory-mapped file without reading the weights,
before onnxruntime sees it: a damaged file is refused in one line.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections import Counter
from pathlib import Path

import numpy as np

from .graph import GraphContents, StoredTensor, TensorSpec
from .identifiers import ORT
from .ort_runtime import min_onnxruntime
from .ort_schema import DIM_PARAM, DIM_VALUE, FILE_IDENTIFIER, STRING, TENSOR_TYPES, Graph, InferenceSession

__all__ = ["read", "read_session", "check_ort", "DEFAULT_DOMAIN"]

DEFAULT_DOMAIN = "ai.onnx"  # the ONNX domain, written "" in a file


def read_session(path: str | os.PathLike, buf=None) -> tuple[InferenceSession, bytes]:
    """The root table of the .ort file at ``path`` and the file's bytes (``buf``, when given, is
    them already: a memory map); ValueError when it does not start like one."""
    path = Path(path)
    buf = path.read_bytes() if buf is None else buf
    if not ORT.found(buf):
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


def check_ort(path: str | os.PathLike) -> None:
    """Walk every table of the .ort at ``path`` as :func:`read` does, each weight's size checked
    against its shape but its bytes never read (the file is memory-mapped: the tables are a small
    part of the file); RuntimeUnavailable, one line, when it is damaged. Run
    before onnxruntime sees the file, whose loader reports some damage only through a retry on
    another provider that it announces on stdout."""
    from ..errors import RuntimeUnavailable

    path = Path(path)
    try:
        with path.open("rb") as fh:
            if os.fstat(fh.fileno()).st_size < 8:
                read_session(path, fh.read())  # says what it is not
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                session, _ = read_session(path, buf)
                try:
                    _read(session, buf, load=False)
                except (IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError, struct.error) as exc:
                    raise ValueError(f"{path} is a damaged .ort model ({type(exc).__name__}: {exc})") from None
    except ValueError as exc:
        raise RuntimeUnavailable(str(exc)) from None


def _str(value: bytes | None) -> str:
    return value.decode("utf-8") if value else ""


def _read(session: InferenceSession, buf, load: bool = True) -> GraphContents:
    """The file's contents; with ``load`` False every table is walked and every size checked,
    but no weight is read (``weights`` is empty)."""
    model = session.model()
    graph = model.graph() if model is not None else None
    if graph is None:
        raise ValueError("no model graph")
    graphs = _graphs(graph)
    weights = [w for g in graphs for w in _initializers(g, buf, load) if w is not None]
    stored = {w.name for w in weights}
    specs = {_str(v.name()): v for v in graph.node_args()}
    inputs = [_spec(name, specs.get(name)) for name in map(_str, graph.inputs()) if name not in stored]
    outputs = [_spec(name, specs.get(name)) for name in map(_str, graph.outputs())]
    if not graph.nodes() and not outputs:
        raise ValueError("an empty graph")
    ops: Counter = Counter()
    kernels: set[tuple[str, str, int]] = set()
    consumers: dict[str, list[str]] = {}
    for g in graphs:
        for node in g.nodes():
            op = _str(node.op_type())
            ops[op] += 1
            kernels.add((_str(node.domain()) or DEFAULT_DOMAIN, op, int(node.since_version())))
            for name in map(_str, node.inputs()):
                readers = consumers.setdefault(name, [])
                if op not in readers:
                    readers.append(op)
            for attr in node.attributes():
                held = [_tensor(t, buf, f"{_str(node.name())}.{_str(attr.name())}", load)
                        for t in ([attr.t()] if attr.t() is not None else []) + attr.tensors()]
                weights += [w for w in held if w is not None]
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
        "min_onnxruntime": min_onnxruntime(opsets.get(DEFAULT_DOMAIN), kernels),
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


def _initializers(graph: Graph, buf, load: bool) -> list[StoredTensor | None]:
    out = [_tensor(t, buf, None, load) for t in graph.initializers()]
    for sparse in graph.sparse_initializers():
        for part, tensor in (("values", sparse.values()), ("indices", sparse.indices())):
            if tensor is not None:
                out.append(_tensor(tensor, buf, f"{_str(tensor.name())}.{part}", load))
    return out


def _tensor(tensor, buf, name: str | None = None, load: bool = True) -> StoredTensor | None:
    """One stored tensor, its values viewed in the file's bytes (not copied); None, once its
    size is checked, when not ``load``."""
    name = name or _str(tensor.name())
    if tensor.external_data_offset() >= 0:
        raise ValueError(f"{name} is kept in a separate data file, which albert-edge does not write")
    dims = tensor.dims()
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if tensor.data_type() == STRING:  # counted as the bytes of its strings
        data = np.frombuffer(b"".join(tensor.string_data()), dtype=np.uint8)
        return StoredTensor(name, data) if load else None
    dtype = TENSOR_TYPES.get(tensor.data_type())
    if dtype is None:
        raise ValueError(f"{name} has unknown data type {tensor.data_type()}")
    span = tensor.raw_data()
    start, size = span if span else (0, 0)
    if size != count * dtype.itemsize:
        raise ValueError(f"{name} holds {size} bytes; its shape {list(dims)} of {dtype.name} needs "
                         f"{count * dtype.itemsize}")
    if not load:
        return None
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
