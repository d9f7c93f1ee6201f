"""The one call that makes a quantized file of a converted one, whatever its format: the
orchestrator above the converters and quantize (``albert-edge quantize`` and the pipeline run it).
It runs the quantizer the file's target entry names (:mod:`.targets`):

- an .onnx is quantized by :func:`albert_edge.quantize.quantize`;
- a .tflite cannot be quantized in place: its graph is converted again from the model its manifest
  names, by the TFLite exporter with the scheme's settings (:func:`.tflite_quantized.quantize`);
- any other file goes to :func:`albert_edge.quantize.quantize`, which says why it is not quantized;
- ``ort=True`` (onnx int8-dynamic) also writes the .ort twin of the checked int8 .onnx, installed
  with it or not at all (:class:`.ort.OrtTwin`).

Each file is checked, measured against its fp32 parent on held-out text and recorded in the
manifest beside it, as :func:`albert_edge.quantize.quantize` says.
"""

from __future__ import annotations

import os
from pathlib import Path

from albert_edge.errors import ConversionError
from albert_edge.quantize import QuantizeConfig, QuantizeResult, quantize

from .ort import OrtTwin
from .targets import of_file

__all__ = ["quantize_file"]


def quantize_file(model_path: str | os.PathLike, config: QuantizeConfig, out_path: str | os.PathLike | None = None,
                  *, force: bool = False, ort: bool = False) -> QuantizeResult:
    """Quantize the fp32 file ``model_path`` (.onnx or .tflite, as ``albert-edge convert`` wrote it)
    with ``config`` into ``out_path`` (default: beside it, named by the scheme); ``ort``: its .ort
    twin too. An existing output is replaced only with ``force``."""
    try:
        quantizer = of_file(Path(model_path).name.lower()).quantizer
    except ConversionError:  # not a file of ours: quantize says why
        quantizer = None
    run = quantizer() if quantizer is not None else quantize
    return run(model_path, config, out_path, force=force, beside=OrtTwin() if ort else None)
