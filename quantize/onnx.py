"""ONNX schemes: int8-dynamic and int8-static through onnxruntime's quantizers, fp16 by
rewriting the graph. Each builder writes the quantized model to ``out`` and returns what it
kept in float on purpose, with the reason.

The exporter's deduplication already gives every MatMul its weight as a direct initializer
(Identity nodes inlined, one transposed initializer per shared Linear, read by every layer),
so onnxruntime quantizes each shared weight once. The word-embedding table, read by a Gather
and by the tied MLM decoder, is quantized here (onnx_graph.quantize_tied_table) before
onnxruntime sees the graph, and its readers are kept away from onnxruntime's quantizer.

int8-dynamic files run each self-attention as one MultiHeadAttention node
(albert_edge.rewrite.onnx_fuse), and compute its Q, K and V as one int8 product over the
three int8 weights, concatenated at load (onnx_graph.pack_attention_inputs): every weight stays
stored once, under its own name.
"""

from __future__ import annotations

import io
import logging
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from albert_edge.rewrite.onnx_fuse import RESIDUALS_AS_SUM, attention_pass
from albert_edge.rewrite.passes import Pass, run_passes
from albert_edge.errors import ConversionError

from .calibration import Batch
from .onnx_graph import (check_gemm_weights, find_lookup_tables, find_word_embeddings, float_tied_decoder,
                         pack_attention_inputs, quantize_tied_table, to_float16)
from .result import Built
from .onnx_npu import dequantized_tied_table
from .schemes import CalibrationMethod, QuantizeConfig, Recipe, static_variant
from .source import ModelFile

__all__ = ["build"]

log = logging.getLogger(__name__)

# Only the products with a weight are quantized; LayerNorm, softmax, GELU and the -10000 mask
# add stay float. The attention products (Q.K^T, probs.V) have no weight: dynamic schemes
# leave them float (MatMulConstBOnly); static QDQ quantizes them with calibrated ranges.
_OP_TYPES = ["MatMul", "Gemm"]


def build(source: ModelFile, out: Path, recipe: Recipe, config: QuantizeConfig,
          calibration: Sequence[Batch] = ()) -> Built:
    """Quantize the fp32 ONNX file of ``source`` into ``out`` with ``recipe``."""
    model = onnx.load(str(source.path), load_external_data=True)
    variant = static_variant(recipe) if _static_inputs(model) else recipe  # a file for a phone's NPU
    builder = _BUILDERS[variant.method]
    model = run_passes(model, _PASSES[recipe.method](source.config.num_attention_heads))
    built = builder(model, out, config, calibration, tied_decoder=variant.tied_decoder)
    if variant is not recipe:
        built.notes.insert(0, variant.notes)
    try:
        onnx.checker.check_model(str(out))
    except onnx.checker.ValidationError as exc:
        raise ConversionError(f"the quantized ONNX graph is invalid: {str(exc).splitlines()[0]}") from None
    return built


def _prepare_embeddings(model: onnx.ModelProto, config: QuantizeConfig,
                        tied_decoder: str = "integer") -> tuple[list[str], dict[str, str], list[str]]:
    """Quantize the word-embedding table ourselves (or keep it float when asked), the tied
    decoder reading it as ``tied_decoder`` says (:class:`.schemes.Recipe`). Returns the nodes
    onnxruntime must leave alone, the weights kept float, and notes."""
    table = find_word_embeddings(model.graph)
    if table is None:
        raise ConversionError("no Gather reads the word embeddings with input_ids: not an albert-edge export")
    if config.quantize_embeddings:
        made = (dequantized_tied_table if tied_decoder == "dequantized" else quantize_tied_table)(model, table)
        note = ("word embeddings: int8 with one scale per row, stored once"
                + (" and read by the tied MLM decoder too" if table.gemms else ""))
        # Position and token-type rows too (3/4 of their bytes, 188 KiB in ALBERT-base): on
        # ALBERT-base int8-dynamic the mean cosine to fp32 of last_hidden_state moved from
        # 0.99968 to 0.99966 (T=128), far inside what the int8 matrix products already cost.
        lookups = find_lookup_tables(model.graph, skip=table.name)
        for lookup in lookups:
            made += quantize_tied_table(model, lookup)
        if lookups:
            note += "; " + ", ".join(t.name for t in lookups) + ": int8 per row"
        check_gemm_weights(model.graph)
        return made, {}, [note]
    kept = {table.name: "word-embedding table kept in float by --no-embeddings"
            + (" (the tied MLM decoder reads it too)" if table.gemms else "")}
    made = float_tied_decoder(model, table)
    check_gemm_weights(model.graph)
    return list(table.gathers) + made, kept, ["word embeddings kept in float (--no-embeddings)"]


class _QuietAdvice(logging.Filter):
    """onnxruntime's quantizers log, on the root logger, advice to run its pre-processing
    (shape inference and graph optimization meant for vision models); albert-edge's exports
    need none of it, and the user cannot act on it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing" not in record.getMessage()


@contextmanager
def _quiet_advice() -> Iterator[None]:
    """Also keeps the calibrators' print() calls off stdout (where --json output goes); what
    they print is logged at debug level instead."""
    quiet = _QuietAdvice()
    root = logging.getLogger()
    root.addFilter(quiet)
    printed = io.StringIO()
    try:
        with redirect_stdout(printed):
            yield
    finally:
        root.removeFilter(quiet)
        if printed.getvalue().strip():
            log.debug("onnxruntime: %s", printed.getvalue().strip())


def _dynamic(model: onnx.ModelProto, out: Path, config: QuantizeConfig, calibration, **_) -> Built:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    exclude, kept, notes = _prepare_embeddings(model, config)
    with _quiet_advice():
        quantize_dynamic(
            model, str(out), weight_type=QuantType.QInt8, per_channel=config.per_channel,
            op_types_to_quantize=_OP_TYPES, nodes_to_exclude=exclude,
            extra_options={"MatMulConstBOnly": True, "EnableSubgraph": True},  # loops: an adaptive file
        )
    quantized = onnx.load(str(out), load_external_data=True)
    if pack_attention_inputs(quantized):
        onnx.save(quantized, str(out))
    return Built(out, kept, notes)


# Calibrator name in onnxruntime, and the options its calibrator takes. quantize_static does not
# pass a bin count on (and with its default of 128 bins for 128 quantized bins, Entropy has one
# candidate threshold: the min/max), so the ranges are computed here with onnxruntime's own
# calibrators and handed to quantize_static as a calibration cache.
_CALIBRATORS = {
    CalibrationMethod.MINMAX: ("MinMax", {}),
    CalibrationMethod.ENTROPY: ("Entropy", {"num_bins": 512, "num_quantized_bins": 128}),
    CalibrationMethod.PERCENTILE: ("Percentile", {"num_bins": 2048, "percentile": 99.999}),
}


def _static(model: onnx.ModelProto, out: Path, config: QuantizeConfig, calibration: Sequence[Batch],
            tied_decoder: str = "integer") -> Built:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    if not calibration:
        raise ConversionError("int8-static needs calibration batches")
    exclude, kept, notes = _prepare_embeddings(model, config, tied_decoder)
    reader = _reader(calibration, _input_dtypes(model))
    with tempfile.TemporaryDirectory(prefix=".albert-edge-calibrate-", dir=out.parent) as tmp:
        method, cache = _calibrate(model, reader, config.calibration_method, Path(tmp))
        with _quiet_advice():
            # uint8 activations with int8 weights: onnxruntime's CPU kernels fuse every QDQ
            # MatMul of this pairing into QLinearMatMul (int8 activations leave half of them as
            # a weight dequantized per call and a float MatMul).
            quantize_static(
                model, str(out), None, quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=config.per_channel,
                op_types_to_quantize=_OP_TYPES, nodes_to_exclude=exclude, calibrate_method=method,
                calibration_cache_path=cache,
                extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
            )
    notes.append(f"activation ranges: {config.calibration_method.value} over {reader.count} calibration sequences")
    if exclude and tied_decoder == "integer":
        notes.append("the tied MLM decoder quantizes its input at run time (its table is the embedding lookup's)")
    return Built(out, kept, notes)


def _calibrate(model: onnx.ModelProto, reader, method: CalibrationMethod, tmp: Path):
    """Activation ranges of the MatMul/Gemm inputs, by onnxruntime's calibrator for ``method``,
    written as a calibration cache. Returns (onnxruntime's method, cache path)."""
    from onnxruntime.quantization import CalibrationMethod as OrtMethod
    from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data

    name, options = _CALIBRATORS[method]
    ort_method = getattr(OrtMethod, name)
    onnx.save(model, str(tmp / "model.onnx"))
    with _quiet_advice():
        calibrator = create_calibrator(
            tmp / "model.onnx", _OP_TYPES, augmented_model_path=str(tmp / "augmented.onnx"),
            calibrate_method=ort_method, providers=["CPUExecutionProvider"], extra_options=options,
        )
        calibrator.collect_data(reader)
        ranges = calibrator.compute_data()
    save_tensors_data(ranges, tmp / "ranges.json")
    return ort_method, tmp / "ranges.json"


def _static_inputs(model: onnx.ModelProto) -> bool:
    """Whether every input of ``model`` has a fixed shape (convert --static)."""
    return all(d.HasField("dim_value") for v in model.graph.input for d in v.type.tensor_type.shape.dim)


def _input_dtypes(model: onnx.ModelProto) -> dict[str, np.dtype]:
    """The numpy dtype of each graph input: int64 ids, or int32 in a static file for an NPU."""
    return {v.name: helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type) for v in model.graph.input
            if v.type.tensor_type.elem_type}


def _reader(batches: Sequence[Batch], dtypes: dict[str, np.dtype] | None = None):
    """onnxruntime's CalibrationDataReader over our batches, one example at a time (the
    calibrators keep what each run produces; single rows keep that small on large models), each
    input in the dtype the model takes (``dtypes``)."""
    from onnxruntime.quantization import CalibrationDataReader

    dtypes = dtypes or {}

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = [{k: v[i:i + 1].astype(dtypes.get(k, v.dtype)) for k, v in b.feeds.items()}
                          for b in batches for i in range(b.feeds["input_ids"].shape[0])]
            self.count = len(self.items)
            self._it = iter(self.items)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

        def rewind(self) -> None:
            self._it = iter(self.items)

    return Reader()


def _fp16(model: onnx.ModelProto, out: Path, config: QuantizeConfig, calibration, **_) -> Built:
    onnx.save(to_float16(model), str(out))
    return Built(out, {}, ["every weight and activation in float16; outputs cast back to float32"])


_BUILDERS: dict[str, Callable[..., Built]] = {"dynamic": _dynamic, "static": _static, "fp16": _fp16}

# The rewrites of the fp32 graph before each builder quantizes it, given the model's head count.
# int8-dynamic: each self-attention one node in place of ~35 (Reshape/Transpose/Softmax/shape
# arithmetic), then the residual sums that a default onnxruntime session keeps out of
# SkipLayerNormalization, so LayerNorm stays unfused. Not for static QDQ, which quantizes the
# attention products themselves, nor fp16.
_PASSES: dict[str, Callable[[int], list[Pass[onnx.ModelProto]]]] = {
    "dynamic": lambda num_heads: [attention_pass(num_heads), RESIDUALS_AS_SUM],
    "static": lambda num_heads: [],
    "fp16": lambda num_heads: [],
}
