"""Shared weights stored once in a converted, quantized .tflite flatbuffer.

- ``full_range_tables``: with integer activations the converter quantizes an embedding table
  over the range calibration saw, clipping its largest values; each table is requantized
  symmetric over its whole range.
- ``share_tied_table``: the converter quantizes the word-embedding table twice when the MLM
  decoder is tied to it (per-tensor for the GATHER, per-channel for the FULLY_CONNECTED). The
  decoder is pointed at the GATHER's table, made symmetric per-tensor over its whole range if
  it was not (with integer activations the converter gives it a calibrated range that clips
  it), with its integer bias rescaled to match, and the second copy is dropped.
- ``share_input_ranges``: with integer activations a FULLY_CONNECTED's bias is stored in units
  of its input's scale, which the calibration gives each layer application of a shared weight
  separately: L int32 copies of each shared bias. The applications of one weight are given one
  input range (the union of theirs), so their biases are one tensor again. Their outputs get one
  range as well: XNNPACK packs the requantization scale (input x weight / output scale, per
  channel) with the weights, and a runtime that packs a shared weight once (LiteRT's
  CompiledModel with its weight cache, albert_edge.runtime.Session's default) would requantize
  every application with the first one's output scale (ALBERT-base int8-full: cosine to fp32
  0.2 there against 0.998 in the classic interpreter, which packs per node).

Where a rewrite needs a weight's float values it takes them from the fp32 parent (``originals``)
when one matches, so every requantization rounds once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from albert_edge.formats.copies import same_values
from albert_edge.formats.tflite_model import Model, dequantized, is_quantized, op_inputs, op_outputs

from .tflite_edit import exact_values

__all__ = ["full_range_tables", "share_tied_table", "share_input_ranges"]

log = logging.getLogger(__name__)

# Ops whose output must have their input's quantization (they move bytes): a range set on one
# end must be set on the other. Ops with a fixed output range cannot take another one.
_SAME_PARAMS = {"RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS", "STRIDED_SLICE", "SLICE"}
_FIXED_OUTPUT = {"SOFTMAX", "LOGISTIC", "TANH", "LOG_SOFTMAX", "GATHER"}


def share_tied_table(model: Model, originals: Sequence[np.ndarray] = ()) -> list[str]:
    """Point each FULLY_CONNECTED that holds its own quantized copy of the word-embedding table
    at the table the embedding GATHER reads. Returns the names of the copies dropped."""
    ids = model.input_index("input_ids")
    gathers = [op for op in model.graph.operators
               if model.op_name(op) == "GATHER" and ids is not None and op_inputs(op)[1] == ids]
    if not gathers:
        return []
    gather = gathers[0]
    table = op_inputs(gather)[0]
    if model.constant(table) is None or not is_quantized(model, table):
        return []
    tensors = model.graph.tensors
    values = dequantized(model, table)
    readers, copies = [], []  # decoders reading the table itself; decoders holding their own copy
    for op in model.graph.operators:
        w = op_inputs(op)[1] if model.op_name(op) == "FULLY_CONNECTED" else -1
        if w < 0 or model.constant(w) is None or tuple(tensors[w].shape) != tuple(tensors[table].shape):
            continue
        if w == table or tensors[w].buffer == tensors[table].buffer:
            readers.append(op)
        elif is_quantized(model, w) and same_values(values, model.constant(w)):
            copies.append((op, w))
    if not readers and not copies:
        return []
    _make_symmetric(model, table, exact_values(model, table, originals, clipped=True), op_outputs(gather)[0])
    dropped = []
    for op in readers + [op for op, _ in copies]:
        _rescale_bias(model, op, table, originals)
        inputs = op_inputs(op)
        inputs[1] = table
        op.inputs = inputs
    for _, w in copies:
        if not any(tensors[w].buffer == tensors[k].buffer for k in range(len(tensors)) if k != w):
            model.obj.buffers[tensors[w].buffer].data = None
        dropped.append((tensors[w].name or b"").decode("utf-8", "replace"))
    log.info("the tied MLM decoder reads the embedding table; dropped %d copy(ies)", len(dropped))
    return dropped


def full_range_tables(model: Model, originals: Sequence[np.ndarray] = ()) -> list[str]:
    """Quantize every embedding table (a constant an embedding GATHER or the position SLICE
    reads) over its whole range, symmetric. With integer activations the converter treats such
    a table like an activation and gives it the range calibration saw, which clips the largest
    embedding values of every token. Returns the tables requantized."""
    fixed = []
    for op in model.graph.operators:
        if model.op_name(op) not in ("GATHER", "SLICE"):
            continue
        table = op_inputs(op)[0]
        if model.constant(table) is None or not is_quantized(model, table):
            continue
        before = list(model.graph.tensors[table].quantization.scale)
        _make_symmetric(model, table, exact_values(model, table, originals, clipped=True), op_outputs(op)[0])
        if list(model.graph.tensors[table].quantization.scale) != before:
            fixed.append((model.graph.tensors[table].name or b"").decode("utf-8", "replace"))
    return fixed


def _set_quantization(model: Model, t: int, scale: float, zero: int = 0) -> None:
    """Give tensor ``t`` per-tensor parameters ``scale`` and ``zero``."""
    q = model.schema.QuantizationParametersT()
    q.scale, q.zeroPoint, q.quantizedDimension = [float(scale)], [int(zero)], 0
    model.graph.tensors[t].quantization = q


def _make_symmetric(model: Model, table: int, values: np.ndarray, gathered: int) -> None:
    """FULLY_CONNECTED weights are symmetric (zero point 0) and a weight's range is all of it:
    requantize the table per tensor unless it is already so (with full integer activations the
    converter gives it a calibrated, asymmetric range that clips its largest values), and give
    the GATHER's output the same parameters (it copies bytes)."""
    dtype = model.dtype(model.graph.tensors[table])
    limit = np.iinfo(dtype).max
    scale = float(np.abs(values).max()) / limit or 1.0
    q = model.graph.tensors[table].quantization
    zeros = q.zeroPoint if q.zeroPoint is not None and len(q.zeroPoint) else [0]
    if len(q.scale) == 1 and all(int(z) == 0 for z in zeros) and abs(q.scale[0] - scale) <= 1e-6 * scale:
        return
    data = np.clip(np.rint(values / scale), -limit, limit).astype(dtype)
    model.obj.buffers[model.graph.tensors[table].buffer].data = np.frombuffer(data.tobytes(), dtype=np.uint8)
    _set_quantization(model, table, scale)
    if is_quantized(model, gathered):
        _set_quantization(model, gathered, scale)


def _rescale_bias(model: Model, op, table: int, originals: Sequence[np.ndarray]) -> None:
    """An integer bias is stored in units of input scale x weight scale: re-express it in the
    units of the shared table's (single) scale."""
    inputs = op_inputs(op)
    if len(inputs) < 3 or inputs[2] < 0 or not _is_quantized_bias(model, inputs[2]):
        return
    x_scale = float(model.graph.tensors[inputs[0]].quantization.scale[0])
    _requantize_bias(model, inputs[2], x_scale * float(model.graph.tensors[table].quantization.scale[0]), originals)


def _requantize_bias(model: Model, bias: int, new_scale, originals: Sequence[np.ndarray] = ()) -> None:
    """Store integer bias ``bias`` again with ``new_scale`` (a number, or one per channel),
    from its original float values when they are known."""
    tensor = model.graph.tensors[bias]
    dtype = model.dtype(tensor)
    new = np.asarray(new_scale, dtype=np.float64)
    values = exact_values(model, bias, originals).astype(np.float64)
    data = np.rint(values / new).astype(dtype)
    model.obj.buffers[tensor.buffer].data = np.frombuffer(data.tobytes(), dtype=np.uint8)
    q = model.schema.QuantizationParametersT()
    q.scale = [float(x) for x in np.atleast_1d(new)]
    q.zeroPoint, q.quantizedDimension = [0] * len(q.scale), 0
    tensor.quantization = q


def _is_quantized_bias(model: Model, t: int) -> bool:
    tensor = model.graph.tensors[t]
    dtype = model.dtype(tensor)
    q = tensor.quantization
    return (dtype is not None and dtype.name in ("int32", "int64")
            and q is not None and q.scale is not None and len(q.scale) > 0)


def share_input_ranges(model: Model, originals: Sequence[np.ndarray] = ()) -> int:
    """Give the integer FULLY_CONNECTED ops that read one weight one input range and one output
    range, requantize their biases (if they have any) to it and keep one bias tensor. Returns the
    number of bias copies dropped."""
    groups: dict[int, list] = {}
    for op in model.graph.operators:
        inputs = op_inputs(op)
        if (model.op_name(op) == "FULLY_CONNECTED" and len(inputs) > 1 and model.constant(inputs[1]) is not None
                and is_quantized(model, inputs[0])):
            groups.setdefault(model.graph.tensors[inputs[1]].buffer, []).append(op)
    dropped = 0
    for ops in groups.values():
        if len(ops) > 1:
            dropped += _share_group(model, ops, originals)
    log.info("shared layers read one input range: %d bias copies dropped", dropped)
    return dropped


def _share_group(model: Model, ops: list, originals: Sequence[np.ndarray]) -> int:
    tensors = model.graph.tensors
    inputs_shared = _share_range(model, [op_inputs(op)[0] for op in ops])
    if not (inputs_shared and _share_range(model, [op_outputs(op)[0] for op in ops])):
        log.warning("the applications of a shared weight keep their own ranges: a runtime that packs the "
                    "weight once computes all of them with one application's")
    keep = op_inputs(ops[0])[2] if len(op_inputs(ops[0])) > 2 else -1
    if not inputs_shared or keep < 0 or not _is_quantized_bias(model, keep):
        return 0
    scale = float(tensors[op_inputs(ops[0])[0]].quantization.scale[0])
    w_scale = np.asarray(tensors[op_inputs(ops[0])[1]].quantization.scale, dtype=np.float64)
    # One bias for all: the first application's, in the shared units (the others hold the same
    # parameter, rounded to their own input scale).
    _requantize_bias(model, keep, scale * w_scale, originals)
    dropped = 0
    for op in ops[1:]:
        inputs = op_inputs(op)
        bias = inputs[2] if len(inputs) > 2 else -1
        if bias < 0 or bias == keep:
            continue
        inputs[2] = keep
        op.inputs = inputs
        if sum(t.buffer == tensors[bias].buffer for t in tensors) == 1:
            model.obj.buffers[tensors[bias].buffer].data = None
        dropped += 1
    return dropped


def _share_range(model: Model, ends: list[int]) -> bool:
    """Give ``ends`` (and the tensors that must share their parameters) one range, the union of
    theirs; False (nothing changed) when one of them cannot take it."""
    components = [_same_params_component(model, t) for t in ends]
    if any(c is None for c in components) or not all(is_quantized(model, t) for t in ends):
        return False
    scale, zero = _union_range(model, ends)
    for t in set().union(*components):
        _set_quantization(model, t, scale, zero)
    return True


def _union_range(model: Model, inputs: list[int]) -> tuple[float, int]:
    """Quantization parameters covering every input's calibrated range (and zero)."""
    tensors = model.graph.tensors
    dtype = model.dtype(tensors[inputs[0]])
    info = np.iinfo(dtype)
    lo, hi = 0.0, 0.0
    for t in inputs:
        q = tensors[t].quantization
        s, z = float(q.scale[0]), int(q.zeroPoint[0]) if q.zeroPoint is not None and len(q.zeroPoint) else 0
        lo, hi = min(lo, (info.min - z) * s), max(hi, (info.max - z) * s)
    if dtype == np.int16:  # int16 activations are symmetric
        return max(-lo, hi) / info.max or 1.0, 0
    scale = (hi - lo) / (info.max - info.min) or 1.0
    return scale, int(np.clip(np.rint(info.min - lo / scale), info.min, info.max))


def _same_params_component(model: Model, start: int) -> set[int] | None:
    """The tensors that must share ``start``'s quantization (linked by byte-moving ops), or None
    when one of them cannot take a new range (a constant, a graph input, a fixed-range output)."""
    producers, consumers = model.producers(), model.consumers()
    found, stack = set(), [start]
    while stack:
        t = stack.pop()
        if t in found:
            continue
        found.add(t)
        producer = producers.get(t)
        if producer is None or model.constant(t) is not None or model.op_name(producer) in _FIXED_OUTPUT:
            return None
        if model.op_name(producer) in _SAME_PARAMS:
            stack.append(op_inputs(producer)[0])
        for c in consumers.get(t, ()):
            if model.op_name(c) in _SAME_PARAMS and op_inputs(c)[0] == t:
                stack.extend(op_outputs(c))
    return found
