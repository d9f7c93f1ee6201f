"""Complete: which matrix products of a model file read a weight in floating point, and why.

No MatMul / Gemm / FULLY_CONNECTED / BATCH_MATMUL of a quantized file should read a float
weight unless the quantizer kept it float on purpose; ``float_weights`` lists each one with the
reason. It needs no torch and no tensorflow, so ``albert-edge inspect`` can show it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import FORMATS

__all__ = ["FloatWeight", "float_weights", "UNEXPECTED", "TFLITE_MIN_QUANTIZED"]

TFLITE_MIN_QUANTIZED = 1024  # the TFLite converter leaves weights with fewer elements in float
UNEXPECTED = "unexpected: a quantized file should not keep this weight in float"
_QUANTIZED_DTYPES = {"int8", "uint8", "int16"}
_MIN_QUANTIZED_NUMEL = 32  # an integer tensor this large shows the file is quantized
_ONNX_PASS = {"Identity", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Cast", "Flatten"}
_ONNX_MATMULS = {"MatMul": (0, 1), "Gemm": (0, 1), "Conv": (1,)}
_TFLITE_MATMULS = {"FULLY_CONNECTED": (1,), "BATCH_MATMUL": (0, 1), "CONV_2D": (1,)}


@dataclass(frozen=True)
class FloatWeight:
    """A weight a matrix product reads in floating point."""

    name: str
    op: str
    shape: tuple[int, ...]
    dtype: str
    reason: str

    @property
    def expected(self) -> bool:
        return self.reason != UNEXPECTED


def float_weights(path: str | os.PathLike, kept: dict[str, str] | None = None, *,
                  strict: bool = False, float16: bool = False) -> list[FloatWeight]:
    """Every weight a matrix product of the file at ``path`` reads in float, with the reason.

    For ``albert-edge inspect`` (not ``strict``) reasons are inferred from the file. A
    quantizer checking its own output is ``strict``: only the weights it ``kept`` on purpose,
    float16 weights when it made a ``float16`` file, and the small weights the TFLite converter
    never quantizes are expected; any other float weight is a failure.
    """
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    found, gathered, quantized = (_onnx_products if fmt == "onnx" else _tflite_products)(path)
    kept = kept or {}
    out = []
    for name, op, data in found:
        if strict:
            reason = _strict_reason(name, data, fmt, kept, float16)
        else:
            reason = _reason(name, data, fmt, kept, name in gathered, quantized)
        out.append(FloatWeight(name, op, tuple(data.shape), data.dtype.name, reason))
    return out


def _small_for_tflite(fmt: str, data: np.ndarray) -> bool:
    return fmt == "tflite" and data.size < TFLITE_MIN_QUANTIZED


_SMALL = f"under {TFLITE_MIN_QUANTIZED} elements: the TFLite converter keeps small weights in float"
_FLOAT16 = "float16 file: weights are stored in float16"


def _strict_reason(name: str, data: np.ndarray, fmt: str, kept: dict[str, str], float16: bool) -> str:
    if name in kept:
        return kept[name]
    if float16 and data.dtype == np.float16:
        return _FLOAT16
    if _small_for_tflite(fmt, data) and data.dtype == np.float32:
        return _SMALL
    return UNEXPECTED


def _reason(name: str, data: np.ndarray, fmt: str, kept: dict[str, str], gathered: bool, quantized: bool) -> str:
    if name in kept:
        return kept[name]
    if data.dtype == np.float16:
        return _FLOAT16
    if not quantized:
        return "fp32 file: nothing in it is quantized"
    if _small_for_tflite(fmt, data):
        return _SMALL
    if gathered:
        return "the word-embedding table (the embedding lookup reads it too), kept in float"
    return UNEXPECTED


def _onnx_products(path: Path) -> tuple[list[tuple[str, str, np.ndarray]], set[str], bool]:
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path), load_external_data=True).graph
    inits = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
            inits[node.output[0]] = node.attribute[0].t
    producer = {out: node for node in graph.node for out in node.output}

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
    for node in graph.node:
        for i in _ONNX_MATMULS.get(node.op_type, ()):
            name = source(node.input[i]) if i < len(node.input) else None
            if name is None or name in seen:
                continue
            data = numpy_helper.to_array(inits[name])
            if data.dtype.kind == "f" and data.ndim >= 2:
                seen.add(name)
                found.append((name, node.op_type, data))
    gathered = {n.input[0] for n in graph.node if n.op_type == "Gather"}
    quantized = any(t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16)
                    and int(np.prod(t.dims)) >= _MIN_QUANTIZED_NUMEL for t in graph.initializer)
    return found, gathered, quantized


def _tflite_products(path: Path) -> tuple[list[tuple[str, str, np.ndarray]], set[str], bool]:
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
