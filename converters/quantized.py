"""The one call that makes a quantized file of a converted one, whatever its format: the
orchestrator above the converters and quantize (``albert-edge quantize`` and the pipeline run it).

- an .onnx is quantized by :func:`albert_edge.quantize.quantize` with its own builder;
- a .tflite cannot be quantized in place: its graph is converted again from the model its manifest
  names, by the TFLite exporter with the scheme's settings (:mod:`.tflite_quantized`);
- ``ort=True`` (onnx int8-dynamic) also writes the .ort twin of the checked int8 .onnx, installed
  with it or not at all (:class:`.ort.OrtTwin`).

Each file is checked, measured against its fp32 parent on held-out text and recorded in the
manifest beside it, as :func:`albert_edge.quantize.quantize` says.
"""

from __future__ import annotations

import os
from pathlib import Path

from albert_edge.quantize import QuantizeConfig, QuantizeResult, quantize

from . import tflite_quantized
from .ort import OrtTwin

__all__ = ["quantize_file"]


def quantize_file(model_path: str | os.PathLike, config: QuantizeConfig, out_path: str | os.PathLike | None = None,
                  *, force: bool = False, ort: bool = False) -> QuantizeResult:
    """Quantize the fp32 file ``model_path`` (.onnx or .tflite, as ``albert-edge convert`` wrote it)
    with ``config`` into ``out_path`` (default: beside it, named by the scheme); ``ort``: its .ort
    twin too. An existing output is replaced only with ``force``."""
    build = tflite_quantized.build if Path(model_path).suffix.lower() == ".tflite" else None
    return quantize(model_path, config, out_path, force=force, build=build, beside=OrtTwin() if ort else None)
