"""albert_edge.formats: read back every file albert-edge writes, on any device.

Device side: numpy and the standard library (the ONNX reader uses the ``onnx`` package when it
is installed); never torch, tensorflow or the build side (converters, quantize, train).

- :mod:`.kinds`: the kinds of model file, one typed ``Format`` entry each (suffixes, identifier,
  readers, engines, what each runs on); :mod:`.identifiers` the first bytes each starts with.
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

from .kinds import ALL, of_file

__all__ = ["FORMATS", "format_of"]

# File suffix -> format name, derived from the table in .kinds (what callers not yet asking a
# Format read).
FORMATS = {suffix: f.name for f in ALL for suffix in f.suffixes}


def format_of(path: str | os.PathLike) -> str:
    """'onnx', 'ort', 'tflite' or 'executorch' from the file suffix; RuntimeUnavailable for anything else.
    The name of :func:`.kinds.of_file`'s entry."""
    return of_file(path).name
