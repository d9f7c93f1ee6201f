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

from .kinds import Format, of_file

__all__ = ["FloatWeight", "float_weights", "UNEXPECTED", "TFLITE_MIN_QUANTIZED"]

TFLITE_MIN_QUANTIZED = 1024  # the TFLite converter leaves weights with fewer elements in float
UNEXPECTED = "unexpected: a quantized file should not keep this weight in float"


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
    kind = of_file(path)
    if kind.weights_reader is None:  # an .ort or a .pte: inspect lists its weight bytes by dtype instead
        raise ValueError(f"{path}: {kind.precision_note}")
    found, gathered, quantized = kind.weights_reader(path)
    kept = kept or {}
    out = []
    for name, op, data in found:
        if strict:
            reason = _strict_reason(name, data, kind, kept, float16)
        else:
            reason = _reason(name, data, kind, kept, name in gathered, quantized)
        out.append(FloatWeight(name, op, tuple(data.shape), data.dtype.name, reason))
    return out


def _kept_small(kind: Format, data: np.ndarray) -> bool:
    return kind.small_weights_float and data.size < TFLITE_MIN_QUANTIZED


_SMALL = f"under {TFLITE_MIN_QUANTIZED} elements: the TFLite converter keeps small weights in float"
_FLOAT16 = "float16 file: weights are stored in float16"


def _strict_reason(name: str, data: np.ndarray, kind: Format, kept: dict[str, str], float16: bool) -> str:
    if name in kept:
        return kept[name]
    if float16 and data.dtype == np.float16:
        return _FLOAT16
    if _kept_small(kind, data) and data.dtype == np.float32:
        return _SMALL
    return UNEXPECTED


def _reason(name: str, data: np.ndarray, kind: Format, kept: dict[str, str], gathered: bool, quantized: bool) -> str:
    if name in kept:
        return kept[name]
    if data.dtype == np.float16:
        return _FLOAT16
    if not quantized:
        return "fp32 file: nothing in it is quantized"
    if _kept_small(kind, data):
        return _SMALL
    if gathered:
        return "the word-embedding table (the embedding lookup reads it too), kept in float"
    return UNEXPECTED
