"""Once: where each weight of the fp32 parent is stored in a quantized file.

Byte comparison (albert_edge.formats.weights) cannot see two int8 copies of one weight made
with different scales, so copies are found by value. A float tensor holds a parent weight when
it equals it rounded to its type. An integer tensor whose quantization the file records
(TFLite) holds it when, dequantized, it is within half a step everywhere (a table quantized
over a clipped range, by correlation). An integer tensor without recorded parameters (ONNX
initializers: their scales are other tensors) holds it when, scaled per row, per column or as
a whole, it correlates with the weight (as stored or transposed) at ``MATCH`` or better.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .graph import GraphContents
from .kinds import find
from .weights import read_file

__all__ = ["WeightCopies", "weight_copies", "same_values", "tolerance", "MATCH", "MIN_COPY_NUMEL"]

# Correlation at which an integer tensor is taken for a quantized copy of a parent weight. Real
# int8 copies score 0.9989 or more (a LayerNorm scale near 1, per-tensor); distinct parameters
# that training makes alike (a bias and the LayerNorm shift after it) reach 0.995.
MATCH = 0.998
MIN_COPY_NUMEL = 32  # smaller tensors (scalars, shapes, the biases of toy models) are not matched
_CLIPPED_MIN_NUMEL = 1024  # large enough that correlation cannot pair two distinct parameters


@dataclass
class WeightCopies:
    """Where one weight of the fp32 parent is stored in the quantized file."""

    name: str
    shape: tuple[int, ...]
    stored_as: list[tuple[str, str]] = field(default_factory=list)  # (tensor name, dtype)


@dataclass(frozen=True)
class _Stored:
    """A stored tensor as the copy search sees it: its values, and for an integer tensor whose
    quantization the file records (TFLite), those values dequantized and the largest step."""

    name: str
    dtype: str
    values: np.ndarray
    step: float | None = None
    raw: np.ndarray | None = None


def weight_copies(parent: GraphContents, quantized: GraphContents | str | os.PathLike,
                  min_numel: int = MIN_COPY_NUMEL) -> list[WeightCopies]:
    """For each float weight of ``parent`` (at least ``min_numel`` elements, not uniform), the
    tensors of ``quantized`` (its contents, or for TFLite better its path, whose quantization
    parameters make the comparison exact) that hold its values."""
    candidates: dict[int, list[_Stored]] = defaultdict(list)
    for stored in _stored(quantized):
        if stored.values.size >= min_numel and _varies(stored.values):
            candidates[int(stored.values.size)].append(stored)
    out = []
    for weight in parent.weights:
        data = weight.data
        if data.dtype.kind != "f" or data.size < min_numel or not _varies(data):
            continue
        copies = WeightCopies(weight.name, tuple(data.shape))
        for cand in candidates.get(int(data.size), ()):
            if _holds(data, cand):
                copies.stored_as.append((cand.name, cand.dtype))
        out.append(copies)
    return out


def tolerance(step: float, values: np.ndarray) -> float:
    """Half a quantization step, plus what float32 scales and products lose (a bias is an
    int32/int64 in units of a tiny scale)."""
    return 0.5 * step * (1 + 1e-3) + 1e-5 * float(np.abs(values).max())


def _stored(quantized: GraphContents | str | os.PathLike) -> list[_Stored]:
    if isinstance(quantized, GraphContents):
        return [_Stored(t.name, t.dtype, t.data) for t in quantized.weights]
    path = Path(quantized)
    kind = find(path)
    if kind is None or not kind.stores_quantization:
        return _stored(read_file(path))
    from .tflite_model import load

    model = load(path.read_bytes())
    out, seen = [], set()
    # Every subgraph: a loop's body holds the shared layer's constants.
    for graph, i, tensor in ((g, i, t) for g in model.obj.subgraphs for i, t in enumerate(g.tensors)):
        values = model.constant(i, graph)
        if values is None or tensor.buffer in seen:
            continue
        seen.add(tensor.buffer)
        name = tensor.name.decode("utf-8", "replace") if isinstance(tensor.name, bytes) else str(tensor.name or "")
        q = tensor.quantization
        if values.dtype.kind in "iu" and q is not None and q.scale is not None and len(q.scale):
            scale = np.asarray(q.scale, dtype=np.float64)
            zero = np.asarray(q.zeroPoint if q.zeroPoint is not None and len(q.zeroPoint) else [0], dtype=np.float64)
            if scale.size > 1 and values.ndim:
                shape = [1] * values.ndim
                shape[q.quantizedDimension] = -1
                scale = scale.reshape(shape)
                zero = zero.reshape(shape) if zero.size > 1 else zero
            out.append(_Stored(name, values.dtype.name, (values - zero) * scale, float(np.max(q.scale)), values))
        else:
            out.append(_Stored(name, values.dtype.name, values))
    return out


def _holds(weight: np.ndarray, stored: _Stored) -> bool:
    if stored.step is None:
        return same_values(weight, stored.values)
    w = _as_2d(weight.astype(np.float64))
    limit = tolerance(stored.step, w)
    s = stored.values.reshape(-1)
    layouts = [s.reshape(w.shape)] + ([s.reshape(w.shape[1], w.shape[0]).T] if w.shape[0] != 1 else [])
    if any(float(np.abs(w - c).max()) <= limit for c in layouts):
        return True
    # A table quantized over a calibrated range narrower than its values (the converter treats
    # an embedding lookup's table like an activation) is clipped, not rounded: match it by value.
    return w.size >= _CLIPPED_MIN_NUMEL and stored.raw is not None and same_values(weight, stored.raw)


def _varies(data: np.ndarray) -> bool:
    flat = data.reshape(-1)
    return bool(flat.size) and bool(np.any(flat != flat[0]))


def _as_2d(data: np.ndarray) -> np.ndarray:
    return data.reshape(data.shape[0], -1) if data.ndim >= 2 else data.reshape(1, -1)


def same_values(weight: np.ndarray, stored: np.ndarray) -> bool:
    """Whether ``stored`` holds ``weight`` (as stored or transposed): exactly, once rounded to
    its float type; or, for integer types, correlating at MATCH or better once scaled per row,
    per column or as a whole (which cancels per-tensor and per-channel quantization scales)."""
    w = _as_2d(weight)
    layouts = [stored.reshape(w.shape)]
    if w.shape[0] != 1:
        layouts.append(stored.reshape(w.shape[1], w.shape[0]).T)
    if stored.dtype.kind == "f":
        w = w.astype(stored.dtype)
        return any(np.array_equal(w, c) for c in layouts)
    w = w.astype(np.float64)
    for c in layouts:
        c = c.astype(np.float64)
        for axis in (None, 0, 1):
            if _correlation(_scaled(w, axis), _scaled(c, axis)) >= MATCH:
                return True
    return False


def _scaled(x: np.ndarray, axis: int | None) -> np.ndarray:
    """``x`` divided by its largest magnitude overall, per column (axis 0) or per row (axis 1):
    per-channel quantization scales cancel out."""
    amax = np.abs(x).max(axis=axis, keepdims=axis is not None)
    return x / np.where(amax > 0, amax, 1.0)


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1) - a.mean(), b.reshape(-1) - b.mean()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom > 0 else 0.0
