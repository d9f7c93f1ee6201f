"""The matrix products of a model file that read a stored weight, for :mod:`.float_weights`: each
product's weight found through the operators that only pass it on (Identity, Transpose, a
DEQUANTIZE of an fp16 or int8 weight), in every graph of the file. One reader per format; no
torch and no tensorflow (the ONNX one needs the ``onnx`` package).

Each reader returns (products, gathered, quantized): every float weight a product reads as
(name, op, values), once; the weights an embedding lookup (Gather) reads; and whether the file
holds quantized weights at all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["Products", "onnx_products", "tflite_products"]

Products = tuple[list[tuple[str, str, np.ndarray]], set[str], bool]

_QUANTIZED_DTYPES = {"int8", "uint8", "int16"}
_MIN_QUANTIZED_NUMEL = 32  # an integer tensor this large shows the file is quantized
_ONNX_PASS = {"Identity", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Cast", "Flatten"}
_ONNX_MATMULS = {"MatMul": (0, 1), "Gemm": (0, 1), "Conv": (1,)}
_TFLITE_MATMULS = {"FULLY_CONNECTED": (1,), "BATCH_MATMUL": (0, 1), "CONV_2D": (1,)}


def onnx_products(path: Path) -> Products:
    import onnx
    from onnx import numpy_helper

    graphs = _onnx_graphs(onnx.load(str(path), load_external_data=True).graph)
    nodes = [node for g in graphs for node in g.node]  # a loop's body (an adaptive file's passes) included
    initializers = [t for g in graphs for t in g.initializer]
    inits = {t.name: t for t in initializers}
    for node in nodes:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
            inits[node.output[0]] = node.attribute[0].t
    producer = {out: node for node in nodes for out in node.output}

    def source(name: str) -> str | None:
        for _ in range(16):
            if name in inits:
                return name
            node = producer.get(name)
            if node is None or node.op_type not in _ONNX_PASS:
                return None
            name = node.input[0]
        return None

    found, seen = [], set()
    for node in nodes:
        for i in _ONNX_MATMULS.get(node.op_type, ()):
            name = source(node.input[i]) if i < len(node.input) else None
            if name is None or name in seen:
                continue
            data = numpy_helper.to_array(inits[name])
            if data.dtype.kind == "f" and data.ndim >= 2:
                seen.add(name)
                found.append((name, node.op_type, data))
    gathered = {n.input[0] for n in nodes if n.op_type == "Gather"}
    quantized = any(t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16)
                    and int(np.prod(t.dims)) >= _MIN_QUANTIZED_NUMEL for t in initializers)
    return found, gathered, quantized


def _onnx_graphs(graph) -> list:
    """``graph`` and every graph its nodes hold (Loop and If bodies), depth first."""
    import onnx

    out = [graph]
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                out += _onnx_graphs(attr.g)
    return out


def tflite_products(path: Path) -> Products:
    from .tflite_model import load

    model = load(path.read_bytes())

    def constant(graph, producer: dict, index: int) -> tuple[str, np.ndarray] | None:
        for _ in range(4):  # through DEQUANTIZE (fp16 or int8 weights dequantized at load)
            values = model.constant(index, graph)
            if values is not None:
                return _text(graph.tensors[index].name), values
            op = producer.get(index)
            if op is None or model.op_name(op) != "DEQUANTIZE":
                return None
            index = int(op.inputs[0])
        return None

    found, seen, gathered, quantized = [], set(), set(), False
    # Every subgraph: a loop's body (convert --layers loop) holds the shared layer's products.
    for graph, producer, op in ((g, p, op) for g in model.obj.subgraphs
                                for p in [model.producers(g)] for op in g.operators):
        name = model.op_name(op)
        inputs = [int(i) for i in (op.inputs if op.inputs is not None else ())]
        if name == "GATHER" and inputs:
            got = constant(graph, producer, inputs[0])
            if got is not None:
                gathered.add(got[0])
        for i in _TFLITE_MATMULS.get(name, ()):
            got = constant(graph, producer, inputs[i]) if i < len(inputs) and inputs[i] >= 0 else None
            if got is None:
                continue
            tname, data = got
            if data.dtype.name in _QUANTIZED_DTYPES and data.size >= _MIN_QUANTIZED_NUMEL:
                quantized = True
            if data.dtype.kind == "f" and data.ndim >= 2 and tname not in seen:
                seen.add(tname)
                found.append((tname, name, data))
    return found, gathered, quantized


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")
