"""Read an .onnx file back: inputs and outputs, the op histogram and every stored constant
(initializers, including those in external data files, and Constant nodes). Needs only the
``onnx`` package: no torch, no onnxruntime."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

from albert_edge.errors import RuntimeUnavailable, install_line, optional_import

from .graph import GraphContents, StoredTensor, TensorSpec

__all__ = ["read"]


def _onnx():
    try:
        onnx = optional_import("onnx")
    except ImportError:
        raise RuntimeUnavailable(f"reading .onnx files needs onnx ({install_line('onnx')})") from None
    return onnx


def read(path: str | os.PathLike) -> GraphContents:
    """What the .onnx file at ``path`` holds. Raises ValueError if it is not an ONNX model."""
    onnx = _onnx()
    path = Path(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
        external = sorted(_external_files(model.graph))  # loading the data forgets where it was
        if external:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, str(path.parent))
    except Exception as exc:  # protobuf DecodeError, missing external data file, ...
        raise ValueError(f"{path} is not a readable ONNX model: {str(exc).strip().splitlines()[0]}") from None
    if not model.graph.node and not model.graph.output:
        raise ValueError(f"{path} is not an ONNX model (empty graph)")
    graph = model.graph
    initializer_names = {t.name for t in graph.initializer}
    inputs = [_spec(v) for v in graph.input if v.name not in initializer_names]
    outputs = [_spec(v) for v in graph.output]
    ops = Counter(node.op_type for node in _all_nodes(graph))
    metadata = {
        "opset": _opset(model),
        "ir_version": int(model.ir_version),
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "external_data": external,
        **{p.key: p.value for p in model.metadata_props},
    }
    return GraphContents(format="onnx", inputs=inputs, outputs=outputs, ops=ops,
                         weights=_stored_tensors(graph), metadata=metadata)


def _spec(value_info) -> TensorSpec:
    onnx = _onnx()
    tensor_type = value_info.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name if tensor_type.elem_type else "unknown"
    shape: list[int | str] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            shape.append(int(dim.dim_value))
        else:
            shape.append(dim.dim_param or -1)
    return TensorSpec(name=value_info.name, dtype=dtype, shape=tuple(shape))


def _opset(model) -> int | None:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return None


def _all_nodes(graph):
    """Every node, including those in subgraphs (If/Loop bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _all_nodes(sub)


def _external_files(graph) -> set[str]:
    onnx = _onnx()
    files = set()
    for tensor in graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            files.update(e.value for e in tensor.external_data if e.key == "location")
    return files


def _stored_tensors(graph) -> list[StoredTensor]:
    """Initializers and Constant-node tensors, with the op types that read each one."""
    onnx = _onnx()
    from onnx import numpy_helper

    consumers: dict[str, list[str]] = {}
    for node in _all_nodes(graph):
        for name in node.input:
            ops = consumers.setdefault(name, [])
            if node.op_type not in ops:
                ops.append(node.op_type)
    stored = [
        StoredTensor(name=t.name, data=_readonly(numpy_helper.to_array(t)), consumers=tuple(consumers.get(t.name, ())))
        for t in graph.initializer
    ]
    for node in _all_nodes(graph):
        if node.op_type != "Constant":
            continue
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                data = _readonly(numpy_helper.to_array(attr.t))
                name = node.output[0]
                stored.append(StoredTensor(name=name, data=data, consumers=tuple(consumers.get(name, ()))))
    return stored


def _readonly(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    array.flags.writeable = False
    return array
