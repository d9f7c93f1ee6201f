"""TFLite schemes. A .tflite file cannot be quantized again, so the graph is rebuilt: the
manifest beside the fp32 file names the source checkpoint, head and sequence length; the
model is loaded from it and converted through the converters' TensorFlow re-statement with
the recipe's converter settings (optimizations, supported ops and types, a representative
dataset of real text). The result is then rewritten where the converter falls short
(tflite_islands: LayerNorm and attention mask in float; tflite_sharing: shared weights and
biases stored once), and goes through the exporter's own checks (builtin ops only, the serving
signature).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from albert_edge.converters.weights import read_file
from albert_edge.errors import ConversionError

from .calibration import Batch
from .result import Built
from .schemes import QuantizeConfig, Recipe
from .source import ModelFile
from .tflite_islands import drop_unused, float_islands, run_in_float
from .tflite_model import load, pack
from .tflite_sharing import full_range_tables, share_input_ranges, share_tied_table

__all__ = ["build", "rebuild_model"]

log = logging.getLogger(__name__)


def rebuild_model(source: ModelFile):
    """The PyTorch model the fp32 file was converted from, loaded again from its checkpoint."""
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
    return model


def build(source: ModelFile, out: Path, recipe: Recipe, config: QuantizeConfig,
          calibration: Sequence[Batch] = ()) -> Built:
    from albert_edge.converters import tflite as exporter

    if recipe.representative and not calibration:
        raise ConversionError(f"tflite {recipe.scheme.value} needs calibration batches")
    model = rebuild_model(source)
    notes: list[str] = []

    per_channel = config.per_channel
    if recipe.tied_per_tensor and "prediction_logits" in source.output_names:
        per_channel = False
        notes.append(recipe.notes)

    originals = [w.data for w in read_file(source.path).weights]  # the parent's fp32 weights

    def run(converter) -> bytes:
        _configure(converter, recipe, per_channel, calibration)
        flatbuffer = converter.convert()
        return _rewrite(flatbuffer, recipe, notes, originals)

    flatbuffer = exporter.convert(model, seq_len=config.seq_len or source.seq_len, run_converter=run)
    out.write_bytes(flatbuffer)
    return Built(out, {}, notes)


def _configure(converter, recipe: Recipe, per_channel: bool, calibration: Sequence[Batch]) -> None:
    """The recipe's converter settings, applied as data."""
    import tensorflow as tf

    if recipe.optimizations:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_ops = [getattr(tf.lite.OpsSet, name) for name in recipe.supported_ops]
    converter.target_spec.supported_types = [getattr(tf, name) for name in recipe.supported_types]
    if recipe.representative:
        converter.representative_dataset = lambda: _examples(calibration)
    converter._experimental_disable_per_channel = not per_channel
    if converter._experimental_use_buffer_offset and recipe.rewrites:
        raise ConversionError("the model is too large (over 1 GiB of weights) for the TFLite rewrites of this scheme")


def _examples(batches: Sequence[Batch]) -> Iterator[dict[str, np.ndarray]]:
    """One example at a time, int32 as the TFLite signature takes it."""
    for batch in batches:
        for row in range(batch.feeds["input_ids"].shape[0]):
            yield {name: value[row:row + 1].astype(np.int32) for name, value in batch.feeds.items()}


def _rewrite(flatbuffer: bytes, recipe: Recipe, notes: list[str], originals: list[np.ndarray]) -> bytes:
    if not recipe.rewrites:
        return flatbuffer
    model = load(flatbuffer)
    if recipe.full_range_tables:
        fixed = full_range_tables(model, originals)
        if fixed:
            notes.append(f"embedding tables quantized over their whole range, not the calibrated one that "
                         f"clipped them: {', '.join(fixed)}")
    if recipe.share_tied_table:
        dropped = share_tied_table(model, originals)
        if dropped:
            notes.append("the tied MLM decoder reads the embedding lookup's int8 table (per-tensor scale); "
                         f"the converter's second copy ({', '.join(dropped)}) was dropped")
    if recipe.float_islands:
        count = run_in_float(model, float_islands(model), originals)
        notes.append(f"{count} ops run in float: LayerNorm statistics and the attention-mask path "
                     "(cast, -10000 bias, scaled scores, masked softmax)")
    if recipe.share_input_ranges:
        dropped = share_input_ranges(model, originals)
        notes.append("the layer applications of each shared weight read one input range (the union of "
                     f"their calibrated ranges), so each integer bias is stored once ({dropped} copies dropped)")
    drop_unused(model)
    return pack(model)
