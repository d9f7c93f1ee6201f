"""albert-edge's public Python API, named in one place.

Everything a user's code should need is importable from here, and the API reference
(docs/reference/api.md) documents exactly these names, each where it is defined:

    from albert_edge.api import Session, AlbertTokenizer, convert, quantize_file, QuantizeConfig

The device side (config, tokenizer, ``Session``, ``profile``, reports, manifests) is imported
with this module and needs no torch or tensorflow. The build side (``convert``, ``quantize_file``,
``load_model``, ``run_pipeline``...) is imported on first use of its name, so importing this module
on a Raspberry Pi or phone build stays torch-free. Like the CLI and ``albert_edge.info``, this
module is a front over both sides.
"""

from __future__ import annotations

from typing import Any

from .config import PRESETS, AlbertConfig, load_config
from .errors import AlbertEdgeError
from .formats.manifest import FileEntry, Manifest
from .profile import Latency, Memory, ProfileRecord, ProfileSettings, profile
from .report import ReportResult, write_report
from .runtime import Session, TensorSpec
from .tokenizer import AlbertTokenizer, train_spiece

# Names of the device side, imported above.
DEVICE = ["AlbertConfig", "PRESETS", "load_config", "AlbertTokenizer", "train_spiece", "Session", "TensorSpec",
          "profile", "ProfileSettings", "ProfileRecord", "Latency", "Memory", "write_report", "ReportResult",
          "Manifest", "FileEntry", "AlbertEdgeError"]
# Names of the build side, imported by __getattr__ on first use.
BUILD = ["convert", "ConversionResult", "ConvertedFile", "quantize_file", "QuantizeConfig", "QuantizeResult",
         "AccuracyReport", "load_model", "save_checkpoint", "build_model", "run_pipeline", "PipelineOptions",
         "PipelineResult"]
__all__ = DEVICE + BUILD


def __getattr__(name: str) -> Any:
    """The build side's names, imported when first asked for (PEP 562)."""
    if name in ("convert", "ConversionResult", "ConvertedFile"):
        from .converters import export

        return getattr(export, name)
    if name == "quantize_file":
        from .converters.quantized import quantize_file

        return quantize_file
    if name in ("QuantizeConfig", "QuantizeResult", "AccuracyReport"):
        from . import quantize

        return getattr(quantize, name)
    if name in ("load_model", "save_checkpoint"):
        from . import checkpoints

        return checkpoints.load_model if name == "load_model" else checkpoints.save
    if name == "build_model":
        from .model import build_model

        return build_model
    if name in ("run_pipeline", "PipelineOptions", "PipelineResult"):
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
