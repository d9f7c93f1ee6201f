"""A TFLite scheme's file, converted again from the model: a .tflite cannot be quantized in place,
so the model is loaded from the checkpoint its manifest names (the head and outputs it was
converted with) and the TFLite exporter runs with the scheme's converter settings and rewrites
(:func:`albert_edge.quantize.tflite.plan`); a static-shape parent gives a static-shape file of
its length. :func:`quantize` is the TFLite targets' quantizer (their entry in :mod:`.targets`, what
:func:`albert_edge.converters.quantized.quantize_file` runs for a .tflite): quantize's checks,
measurements and manifest around :func:`build`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from albert_edge.errors import ConversionError
from albert_edge.quantize import Companion, QuantizeResult, quantizing
from albert_edge.quantize.calibration import Batch
from albert_edge.quantize.result import Built
from albert_edge.quantize.schemes import QuantizeConfig, Recipe
from albert_edge.quantize.source import ModelFile
from albert_edge.quantize.tflite import Form, plan

from . import tflite as exporter
from .mediapipe import file_model, with_parent_metadata
from .outputs import select_outputs

__all__ = ["quantize", "build", "rebuild_model"]


def quantize(model_path: str | os.PathLike, config: QuantizeConfig, out_path: str | os.PathLike | None = None,
             *, force: bool = False, beside: Companion | None = None) -> QuantizeResult:
    """:func:`albert_edge.quantize.quantize` for the fp32 .tflite ``model_path``: the file is
    converted again from its model (:func:`build`), then checked, measured and recorded."""
    with quantizing(model_path, config, out_path, force=force, beside=beside) as job:
        job.built = build(job.source, job.tmp, job.recipe, job.config, job.text.calibration)
    return job.result


def rebuild_model(source: ModelFile, task: dict | None = None):
    """The PyTorch model the fp32 file was converted from, loaded again from its checkpoint;
    ``task`` is the file's TFLite metadata as the reader gives it (a MediaPipe task file), if any."""
    from albert_edge import checkpoints

    if source.checkpoint is None:
        raise ConversionError(f"{source.path.name}: its manifest records no source checkpoint, and a TFLite "
                              "scheme rebuilds the graph from it; convert from a checkpoint directory")
    if not source.checkpoint.exists():
        raise ConversionError(f"{source.path.name} was converted from {source.checkpoint}, which no longer exists")
    config, model = checkpoints.load_model(source.checkpoint, source.head)
    if config.to_hf_dict() != source.config.to_hf_dict():
        raise ConversionError(f"{source.checkpoint} no longer has the config recorded in the manifest "
                              f"of {source.path.name}")
    rule = source.adaptive
    if rule is not None:  # convert --adaptive: the same loop and exit rule
        from albert_edge.exits import ExitRule

        from .adaptive import adaptive_model

        model = adaptive_model(model, ExitRule.from_dict(rule))
    if task is not None:  # a MediaPipe task file: its outputs are the task's
        return file_model(model)
    return model if rule is not None else select_outputs(model, source.output_names)  # the parent's outputs


def build(source: ModelFile, out: Path, recipe: Recipe, config: QuantizeConfig,
          calibration: Sequence[Batch] = (), form: Form = Form()) -> Built:
    """Write ``recipe``'s file of the fp32 .tflite ``source`` to ``out``."""
    settings = plan(source, recipe, config, calibration, form)
    model = rebuild_model(source, settings.task)
    flatbuffer = exporter.convert(model, seq_len=settings.seq_len, run_converter=settings.run,
                                  runtime=settings.runtime, layers=settings.layers, static=settings.static)
    if settings.task is not None:  # the app reads the task, tokenizer and labels from it
        flatbuffer = with_parent_metadata(flatbuffer, source.path, settings.seq_len, model.output_names)
        settings.notes.append("TFLite metadata (task, tokenizer, labels) copied from the fp32 file")
    out.write_bytes(flatbuffer)
    return Built(out, settings.kept_float, settings.notes)
