"""Float islands in a converted, quantized .tflite flatbuffer.

``float_islands`` picks the ops that must not run in int8/int16: LayerNorm's statistics (mean,
variance, rsqrt and the normalization with its scale and shift) and the attention-mask path (the
cast, the -10000 bias, the scaled scores it is added to, and the masked softmax). The scaled
scores are there because the converter gives them the range of the sum they feed, -10000
included: in int8 that rounds every score to zero and every attention to uniform.

With the faster form for ai-edge-litert (quantize.tflite.Form) the attention's score and context
products and the GELUs run in float as well: XNNPACK delegates neither an int8 BATCH_MATMUL nor
an int8 GELU, and it fuses dequantize -> float GELU -> quantize into one int8 lookup table.

``run_in_float`` makes those ops float: their quantized inputs are dequantized (a quantized
constant is replaced by its fp32 original, one tensor for all its uses), and their results are
quantized again, with the calibrated ranges, where int8/int16 ops read them. ``drop_unused``
empties the buffers nothing reads any more.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from albert_edge.formats.tflite_model import Model, dequantized, is_quantized, op_inputs, op_outputs

from .tflite_edit import make_op, new_float_tensor, original_of, quant_version

__all__ = ["float_islands", "run_in_float", "drop_unused"]

log = logging.getLogger(__name__)

_LN_STATS = {"MEAN", "SQUARED_DIFFERENCE", "RSQRT"}
_ELEMENTWISE = {"SUB", "MUL", "ADD", "RSQRT", "SQUARED_DIFFERENCE", "MEAN", "DIV"}
_PASS_THROUGH = {"QUANTIZE", "DEQUANTIZE"}  # walked through, never made float themselves


def float_islands(model: Model, attention_products: bool = True, gelu: bool = True) -> set[int]:
    """Indices of the ops to run in float (see the module docstring); ``attention_products``
    adds the attention's BATCH_MATMULs (scores and context, no weights), ``gelu`` the GELUs."""
    ops = model.graph.operators
    index = {id(op): i for i, op in enumerate(ops)}
    consumers = model.consumers()
    island: set[int] = set()
    if attention_products:
        island.update(i for i, op in enumerate(ops) if model.op_name(op) == "BATCH_MATMUL"
                      and all(model.constant(t) is None for t in op_inputs(op)))
    if gelu:
        island.update(i for i, op in enumerate(ops) if model.op_name(op) == "GELU")
    mask = model.input_index("attention_mask")
    stack = [mask] if mask is not None else []
    seen: set[int] = set()
    while stack:  # the mask path, forward from the input up to each softmax
        tensor = stack.pop()
        for op in consumers.get(tensor, ()):
            i = index[id(op)]
            if i in seen:
                continue
            seen.add(i)
            name = model.op_name(op)
            if name not in _PASS_THROUGH:
                island.add(i)
            if name != "SOFTMAX":
                stack.extend(op_outputs(op))
    producers = model.producers()
    for i in sorted(island):  # the attention scores' scaling, which feeds the mask add
        if model.op_name(ops[i]) == "ADD":
            for t in op_inputs(ops[i]):
                source = producers.get(t)
                if (source is not None and model.op_name(source) in ("MUL", "DIV")
                        and any(model.constant(x) is not None for x in op_inputs(source))):
                    island.add(index[id(source)])
    for i, op in enumerate(ops):  # LayerNorm statistics and the normalization that uses them
        if model.op_name(op) in _LN_STATS:
            island.add(i)
            for t in op_outputs(op):
                island.update(index[id(c)] for c in consumers.get(t, ()) if model.op_name(c) in _ELEMENTWISE)
    grown = True
    while grown:  # the scale and shift after the normalization (a constant operand)
        grown = False
        for i in sorted(island):
            if model.op_name(ops[i]) != "MUL":
                continue
            for t in op_outputs(ops[i]):
                for c in consumers.get(t, ()):
                    j = index[id(c)]
                    if j not in island and model.op_name(c) in ("MUL", "ADD") and any(
                            model.constant(x) is not None for x in op_inputs(c) if x != t):
                        island.add(j)
                        grown = True
    return island


def run_in_float(model: Model, island: set[int], originals: Sequence[np.ndarray] = ()) -> int:
    """Make the ops of ``island`` float, in place. Returns the number of ops made float.

    A quantized constant an island op reads (a LayerNorm scale or shift, which the converter
    quantizes once per layer application) becomes float again: the matching weight of
    ``originals`` (the fp32 parent's weights), one float tensor for all its uses, or else its
    dequantized values. A quantized constant that ops outside the island read too (the int16
    embedding table of a tied decoder) is dequantized at run time instead, so it stays stored
    once; a quantized integer bias becomes its float original.
    """
    ops = model.graph.operators
    consumers = model.consumers()
    index = {id(op): i for i, op in enumerate(ops)}
    graph_outputs = {int(t) for t in model.graph.outputs}
    float_of: dict[int, int] = {}
    by_original: dict[tuple[int, tuple], int] = {}
    new_ops = []
    for i, op in enumerate(ops):
        if i not in island:
            new_ops.append(op)
            continue
        inputs = op_inputs(op)
        for k, t in enumerate(inputs):
            if t < 0 or not (is_quantized(model, t) or _quantized_bias(model, t)):
                continue
            if t not in float_of:
                shared = any(index[id(c)] not in island for c in consumers.get(t, ()))
                if model.constant(t) is not None and not (shared and is_quantized(model, t)):
                    float_of[t] = _float_constant(model, t, originals, by_original)
                else:
                    float_of[t] = new_float_tensor(model, t, "/float")
                    new_ops.append(make_op(model, "DEQUANTIZE", quant_version(model, t), [t], [float_of[t]]))
            inputs[k] = float_of[t]
        op.inputs = inputs
        requantize = []
        outputs = op_outputs(op)
        for k, t in enumerate(outputs):
            if not is_quantized(model, t):
                continue
            outside = t in graph_outputs or any(index[id(c)] not in island for c in consumers.get(t, ()))
            if outside:
                f = new_float_tensor(model, t, "/float")
                float_of[t] = f
                outputs[k] = f
                requantize.append(make_op(model, "QUANTIZE", quant_version(model, t), [f], [t]))
            else:
                tensor = model.graph.tensors[t]
                tensor.type, tensor.quantization = model.schema.TensorType.FLOAT32, None
        op.outputs = outputs
        new_ops.append(op)
        new_ops.extend(requantize)
    model.graph.operators = new_ops
    log.info("%d ops run in float (LayerNorm statistics, attention mask)", len(island))
    return len(island)


def _quantized_bias(model: Model, t: int) -> bool:
    """An int32/int64 constant with a scale: the bias of a quantized matrix product."""
    tensor = model.graph.tensors[t]
    dtype = model.dtype(tensor)
    q = tensor.quantization
    return (dtype is not None and dtype.name in ("int32", "int64") and q is not None and q.scale is not None
            and len(q.scale) > 0 and model.constant(t) is not None)


def _float_constant(model: Model, t: int, originals: Sequence[np.ndarray], made: dict) -> int:
    """The float tensor for quantized constant ``t``: its original, one tensor for all its uses
    (the converter quantizes a LayerNorm parameter once per layer application)."""
    k = original_of(model, t, originals)
    if k is None:
        return new_float_tensor(model, t, "/float", dequantized(model, t))
    tensor = model.graph.tensors[t]
    shape = tuple(int(d) for d in (tensor.shape if tensor.shape is not None else ()))
    if (k, shape) not in made:
        made[(k, shape)] = new_float_tensor(model, t, "/float", originals[k].reshape(shape))
    return made[(k, shape)]


def drop_unused(model: Model) -> int:
    """Empty the buffers no op, graph input or output reaches any more (constants the rewrites
    replaced). Returns how many were emptied. Every subgraph counts: a loop's body reads its
    constants from buffers that tensors of the main graph may point at too."""
    live, dead = set(), set()
    for graph in model.obj.subgraphs:
        used = {int(t) for t in graph.inputs} | {int(t) for t in graph.outputs}
        for op in graph.operators:
            used.update(t for t in op_inputs(op) + op_outputs(op) if t >= 0)
        for t, tensor in enumerate(graph.tensors):
            (live if t in used else dead).add(tensor.buffer)
    emptied = 0
    for index in sorted(dead - live - {0}):
        buf = model.obj.buffers[index]
        if buf.data is not None and len(buf.data):
            buf.data = None
            emptied += 1
    return emptied
