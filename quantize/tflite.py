"""TFLite schemes. A .tflite file cannot be quantized again, so the graph is converted again from
the model (converters.tflite_quantized loads it from the checkpoint the manifest names, and runs
the TFLite exporter with :meth:`Plan.run`): this module gives the recipe's converter settings
(optimizations, supported ops and types, a representative dataset of real text). The result is then rewritten where the converter falls short
(tflite_islands: LayerNorm, the attention mask and, in the default ``Form``, the attention
products and GELU in float; tflite_sharing: shared weights and biases stored once, one range per
shared weight), and goes through the exporter's own checks (builtin ops only, the serving
signature).

By default (``tflite_compat="2.14"``) the file must load in tflite-runtime 2.14, the last
tflite-runtime release and what Raspberry Pi OS bookworm installs: dynamic-range weights are
scaled per tensor (a float-input FULLY_CONNECTED with per-channel scales is operator version 12,
which runtimes before 2.17 refuse, and which 2.14's kernel would compute wrongly under an older
version number: it reads one scale), int16 GELUs run in float (2.14 has no int16 GELU kernel
although the operator version is the same), and the finished file's operator versions are
checked against the runtime table in ``converters.op_versions``. ``"latest"`` keeps per-channel
scales and int16 GELU.
"""


from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from albert_edge.formats.manifest import static_length
from albert_edge.formats.op_versions import TFLITE_RUNTIME_LAST
from albert_edge.formats.tflite_reader import layer_form
from albert_edge.formats.weights import read_file
from albert_edge.errors import ConversionError
from albert_edge.rewrite.passes import Pass, in_place, run_passes

from .calibration import Batch
from .schemes import QuantizeConfig, Recipe
from .source import ModelFile
from .tflite_islands import drop_unused, float_islands, run_in_float
from albert_edge.formats.tflite_model import Model, load, op_inputs, pack
from .tflite_sharing import full_range_tables, share_input_ranges, share_tied_table

__all__ = ["plan", "Plan", "Form"]

log = logging.getLogger(__name__)

# Kernels tflite-runtime 2.14 lacks for an operator version it registers: op -> the types of its
# first inputs. An int16 GELU, and an int16 FULLY_CONNECTED reading int16 weights (the tied MLM
# decoder reading the int16 embedding table).
_MISSING_IN_214 = {"GELU": ("INT16",), "FULLY_CONNECTED": ("INT16", "INT16")}


@dataclass(frozen=True)
class Form:
    """How the rewrites lay out the graph where a scheme leaves a choice; the defaults run best on
    ai-edge-litert (benchmarks/tflite_int8_forms.py compares them).

    ``attention_in_float``: the attention's two BATCH_MATMULs (scores and context, products of two
    activations, no weights) run in float, with their inputs dequantized. XNNPACK delegates no
    int8 BATCH_MATMUL, so in int8 they fall back to LiteRT's builtin kernel, which takes most of an
    int8-full call at long lengths; in float XNNPACK runs them, and the scores keep more than 8 bits.

    ``gelu_in_float``: the GELUs run in float between a dequantize and a quantize, which XNNPACK
    fuses into one int8 lookup-table operator; an int8 GELU it does not delegate, and LiteRT's
    builtin kernel is several times slower than the fused one.
    """

    attention_in_float: bool = True
    gelu_in_float: bool = True


@dataclass
class Plan:
    """How the TFLite converter writes a scheme's file from the model: the settings it is run with
    and the rewrites after it (:meth:`run`, the converter's ``run_converter``), the form of the
    layers, the runtime whose operator versions the file must keep, and notes on what was done.
    Made without the model: converters.tflite_quantized rebuilds the model and runs the plan."""

    recipe: Recipe
    per_channel: bool
    compat: bool
    layers: str
    seq_len: int
    task: dict | None
    calibration: Sequence[Batch]
    originals: list[np.ndarray]
    form: Form
    notes: list[str]
    static: bool = False  # the parent is static-shape ([1, seq_len]): so is its quantized file
    # weights kept in float32 on purpose, with why (what the quantized file's checks expect)
    kept_float: dict[str, str] = field(default_factory=dict)

    @property
    def runtime(self) -> str | None:
        """The oldest runtime the file must load in (None: the newest)."""
        return TFLITE_RUNTIME_LAST if self.compat else None

    def run(self, converter) -> bytes:
        """Configure ``converter`` (a TFLiteConverter of the model), convert, and rewrite the result."""
        _configure(converter, self.recipe, self.per_channel, self.calibration)
        passes = _passes(self.recipe, self.notes, self.originals, self.compat, self.form)
        flatbuffer = _rewrite(converter.convert(), passes)
        if self.static and self.recipe.weights == "float16":
            flatbuffer = _float32_tables(flatbuffer, self.originals, self.notes, self.kept_float)
        return flatbuffer


def plan(source: ModelFile, recipe: Recipe, config: QuantizeConfig, calibration: Sequence[Batch] = (),
         form: Form = Form()) -> Plan:
    """The :class:`Plan` for ``recipe`` of the fp32 file ``source``."""
    if recipe.representative and not calibration:
        raise ConversionError(f"tflite {recipe.scheme.value} needs calibration batches")
    notes: list[str] = []
    layers = layer_form(source.path)  # the quantized file keeps its parent's form where the scheme can
    if layers == "loop" and (recipe.float_islands or recipe.share_input_ranges):
        layers = "unrolled"
        notes.append(f"written unrolled: the {recipe.scheme.value} rewrites (float islands, shared input ranges) "
                     "read one graph, not a WHILE body, so an app's TFLite Interpreter packs the shared weights "
                     "once per layer; int8-dynamic and fp16 keep the loop")
    parent = read_file(source.path)
    task = parent.metadata.get("task")
    static_len = static_length(source.path, parent)
    if static_len is not None and config.seq_len not in (None, static_len):
        raise ConversionError(f"{source.path.name} is static-shape, [1, {static_len}]: its quantized file keeps that "
                              f"length, not seq_len {config.seq_len}")

    per_channel = config.per_channel
    if recipe.tied_per_tensor and "prediction_logits" in source.output_names:
        per_channel = False
        notes.append(recipe.notes)
    compat = config.tflite_compat != "latest"
    if compat and per_channel and _hybrid(recipe):
        per_channel = False
        notes.append(f"weights scaled per tensor, so tflite-runtime {config.tflite_compat} loads the file: per-channel "
                     "scales with float activations need FULLY_CONNECTED version 12 (runtime 2.17); "
                     "--tflite-compat latest keeps them")
    originals = [w.data for w in parent.weights]  # the parent's fp32 weights
    return Plan(recipe, per_channel, compat, layers, static_len or config.seq_len or source.seq_len, task,
                calibration, originals, form, notes, static=static_len is not None)


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


def _hybrid(recipe: Recipe) -> bool:
    """Int8 weights read by float activations (dynamic range): no calibrated activation ranges."""
    return recipe.optimizations and not recipe.representative and recipe.weights == "int8"


def _missing_kernels(model: Model) -> set[int]:
    """The ops tflite-runtime 2.14 has no kernel for (see _MISSING_IN_214), to run in float."""
    found = set()
    tensors = model.graph.tensors
    for i, op in enumerate(model.graph.operators):
        wanted = _MISSING_IN_214.get(model.op_name(op), ())
        inputs = op_inputs(op)[:len(wanted)]
        if wanted and len(inputs) == len(wanted) and all(
                t >= 0 and tensors[t].type == model.type_code(w) for t, w in zip(inputs, wanted)):
            found.add(i)
    return found


_TABLE_KEPT = ("float32 in a static fp16 file: LiteRT's GPU accelerator gathers rows of a float16 table into "
               "float32 on the CPU only (GATHER: Input / output dtype mismatch)")


def _float32_tables(flatbuffer: bytes, originals: list[np.ndarray], notes: list[str],
                    kept: dict[str, str]) -> bytes:
    """A static fp16 file for LiteRT's GPU accelerator: each embedding table a GATHER reads is
    stored in float32 (the parent's values) in place of float16 behind a DEQUANTIZE, which the
    accelerator cannot gather from; every reader of the table (the tied MLM decoder too) reads
    that one float32 tensor, and the float16 copy is dropped."""
    model = load(flatbuffer)
    producers, graph = model.producers(), model.graph
    for op in list(graph.operators):
        table = op_inputs(op)[0] if model.op_name(op) == "GATHER" else -1
        dequantize = producers.get(table)
        if dequantize is None or model.op_name(dequantize) != "DEQUANTIZE":
            continue
        half = model.constant(op_inputs(dequantize)[0])
        if half is None or half.dtype != np.float16:
            continue
        values = next((o for o in originals if o.shape == half.shape and o.dtype == np.float32
                       and np.array_equal(o.astype(np.float16), half)), half.astype(np.float32))
        buffer = model.schema.BufferT()
        buffer.data = np.frombuffer(np.ascontiguousarray(values, dtype=np.float32).tobytes(), dtype=np.uint8)
        model.obj.buffers.append(buffer)
        graph.tensors[table].buffer = len(model.obj.buffers) - 1
        graph.operators.remove(dequantize)
        kept[(graph.tensors[table].name or b"").decode("utf-8", "replace")] = _TABLE_KEPT
    if kept:
        drop_unused(model)
        notes.append(f"embedding tables stored in float32 for LiteRT's GPU accelerator: {', '.join(kept)}")
    return pack(model) if kept else flatbuffer


def _rewrite(flatbuffer: bytes, passes: Sequence[Pass[Model]]) -> bytes:
    """The converter's ``flatbuffer`` rewritten by ``passes`` (as it is when there are none), then
    without the tensors and buffers nothing reads any more."""
    if not passes:
        return flatbuffer
    model = run_passes(load(flatbuffer), passes)
    drop_unused(model)
    return pack(model)


def _passes(recipe: Recipe, notes: list[str], originals: list[np.ndarray], compat: bool = False,
            form: Form = Form()) -> list[Pass[Model]]:
    """The rewrites ``recipe`` asks for after conversion, in the order they run; each adds to
    ``notes`` what it did. ``originals``: the parent's fp32 weights, which requantized constants
    round from."""

    def full_range(model: Model) -> None:
        fixed = full_range_tables(model, originals)
        if fixed:
            notes.append(f"embedding tables quantized over their whole range, not the calibrated one that "
                         f"clipped them: {', '.join(fixed)}")

    def tied_table(model: Model) -> None:
        dropped = share_tied_table(model, originals)
        if dropped:
            notes.append("the tied MLM decoder reads the embedding lookup's int8 table (per-tensor scale); "
                         f"the converter's second copy ({', '.join(dropped)}) was dropped")

    def islands(model: Model) -> None:
        missing = _missing_kernels(model) if compat else set()
        count = run_in_float(model, float_islands(model, form.attention_in_float, form.gelu_in_float) | missing, originals)
        notes.append(f"{count} ops run in float: LayerNorm statistics and the attention-mask path "
                     "(cast, -10000 bias, scaled scores, masked softmax"
                     + (", the score and context products" if form.attention_in_float else "")
                     + (", GELU)" if form.gelu_in_float else ")")
                     + (f", and {len(missing)} int16 ops tflite-runtime 2.14 has no kernel for "
                        "(GELU, int16 x int16 FULLY_CONNECTED)" if missing else ""))

    def input_ranges(model: Model) -> None:
        dropped = share_input_ranges(model, originals)
        notes.append("the layer applications of each shared weight read one input range and write one output "
                     "range (the unions of their calibrated ranges), so each integer bias is stored once "
                     f"({dropped} copies dropped) and a runtime that packs the weight once computes every "
                     "application right")

    ordered = (
        (recipe.full_range_tables, in_place("embedding tables over their whole range", full_range)),
        (recipe.share_tied_table, in_place("tied MLM decoder reads the lookup's table", tied_table)),
        (recipe.float_islands, in_place("float islands", islands)),
        (recipe.share_input_ranges, in_place("one input range per shared weight", input_ranges)),
    )
    return [rewrite for wanted, rewrite in ordered if wanted]
