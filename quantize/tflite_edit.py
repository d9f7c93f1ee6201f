"""Small builders the TFLite rewrites share (quantize/tflite_islands.py, tflite_sharing.py): new
tensors and operators in a :class:`albert_edge.formats.tflite_model.Model`, and the fp32 original
a quantized constant rounds from."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from albert_edge.formats.copies import same_values, tolerance
from albert_edge.formats.tflite_model import Model, dequantized

__all__ = ["new_float_tensor", "make_op", "quant_version", "original_of", "exact_values"]


def new_float_tensor(model: Model, like: int, suffix: str, data: np.ndarray | None = None) -> int:
    s = model.schema
    src = model.graph.tensors[like]
    t = s.TensorT()
    t.shape = None if src.shape is None else list(src.shape)
    t.shapeSignature = None if src.shapeSignature is None else list(src.shapeSignature)
    t.type = s.TensorType.FLOAT32
    t.name = (src.name or b"") + suffix.encode()
    t.buffer = 0
    if data is not None:
        buf = s.BufferT()
        buf.data = np.frombuffer(np.ascontiguousarray(data, dtype=np.float32).tobytes(), dtype=np.uint8)
        model.obj.buffers.append(buf)
        t.buffer = len(model.obj.buffers) - 1
    model.graph.tensors.append(t)
    return len(model.graph.tensors) - 1


def _opcode(model: Model, builtin: str, version: int) -> int:
    s = model.schema
    code = getattr(s.BuiltinOperator, builtin)
    for i, c in enumerate(model.obj.operatorCodes):
        if max(c.builtinCode, c.deprecatedBuiltinCode) == code and c.version >= version:
            return i
    c = s.OperatorCodeT()
    c.builtinCode, c.deprecatedBuiltinCode, c.version = code, min(code, 127), version
    model.obj.operatorCodes.append(c)
    return len(model.obj.operatorCodes) - 1


def make_op(model: Model, builtin: str, version: int, inputs: list[int], outputs: list[int]):
    op = model.schema.OperatorT()
    op.opcodeIndex = _opcode(model, builtin, version)
    op.inputs, op.outputs = list(inputs), list(outputs)
    return op


def quant_version(model: Model, t: int) -> int:
    return 3 if model.dtype(model.graph.tensors[t]).name == "int16" else 2


def original_of(model: Model, t: int, originals: Sequence[np.ndarray], clipped: bool = False) -> int | None:
    """Which of ``originals`` (the fp32 parent's weights) quantized constant ``t`` rounds from:
    within half a quantization step everywhere, the closest if several. A ``clipped`` constant
    (quantized over a calibrated range narrower than its values) is matched by correlation."""
    values = dequantized(model, t).reshape(-1)
    best, best_error = None, tolerance(float(np.max(model.graph.tensors[t].quantization.scale)), values)
    for k, original in enumerate(originals):
        if original.size == values.size and original.dtype.kind == "f":
            error = float(np.abs(original.reshape(-1) - values).max())
            if error <= best_error:
                best, best_error = k, error
    if best is None and clipped:
        raw = model.constant(t)
        best = next((k for k, o in enumerate(originals)
                     if o.size == raw.size and o.dtype.kind == "f" and same_values(o, raw)), None)
    return best


def exact_values(model: Model, t: int, originals: Sequence[np.ndarray], clipped: bool = False) -> np.ndarray:
    """The float values of quantized constant ``t``: its original when known (so requantizing
    rounds once), else its dequantized values."""
    k = original_of(model, t, originals, clipped)
    values = dequantized(model, t)
    return values if k is None else originals[k].reshape(values.shape).astype(np.float32)
