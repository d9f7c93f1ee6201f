"""albert_edge.formats: read back every file albert-edge writes, on any device.

Device side: numpy and the standard library (the ONNX reader uses the ``onnx`` package when it
is installed); never torch, tensorflow or the build side (converters, quantize, train).

- :mod:`.graph`: what a file holds (inputs, outputs, stored tensors), common to every reader.
- :mod:`.onnx_reader`, :mod:`.ort_reader`, :mod:`.tflite_reader`, :mod:`.pte_reader`: the readers;
  :mod:`.ort_schema`, :mod:`.tflite_schema` and :mod:`.pte_schema` are our own flatbuffer accessors
  (on :mod:`.flatbuffer`) for ONNX Runtime .ort, .tflite and ExecuTorch .pte files, :mod:`.tflite_check` the structural check run before
  an interpreter sees a file, :mod:`.tflite_model` the object model the TFLite passes edit.
- :mod:`.op_versions`: each TFLite operator's version and the first runtime release that has it.
- :mod:`.weights`: weights once, proven: stored vs unique bytes and every duplicated weight.
- :mod:`.copies`: where each fp32 weight is stored in a quantized file (int8 copies too).
- :mod:`.float_weights`: every matrix product that reads a float weight, and why.
- :mod:`.manifest`: the ``manifest.json`` beside a conversion's files, and file hashing.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import RuntimeUnavailable

__all__ = ["FORMATS", "format_of"]

# File suffix -> format name. Every model file albert-edge writes or runs is one of these.
FORMATS = {".onnx": "onnx", ".tflite": "tflite", ".pte": "executorch", ".ort": "ort"}


def format_of(path: str | os.PathLike) -> str:
    """'onnx', 'ort', 'tflite' or 'executorch' from the file suffix; RuntimeUnavailable for anything else."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise RuntimeUnavailable(
            f"{path}: unknown model file type {suffix or '(no suffix)'!r}; expected {', '.join(FORMATS)}"
        )
    return FORMATS[suffix]
