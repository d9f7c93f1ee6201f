"""Quantization schemes: their names (one ``str`` Enum), the one table that maps each
(format, scheme) to its recipe and file suffix, and the configuration dataclass.

Quantized forms a target makes at conversion (``convert --scheme``) are named in its entry of
:data:`albert_edge.converters.targets.TARGETS` by these names, their files by :meth:`Scheme.file_suffix`.

A recipe is data. The ONNX quantizer reads ``method`` (which of its three builders runs), the
TFLite quantizer reads the converter settings (``optimizations``, ``supported_ops``,
``supported_types``, ``representative``) and the post-conversion steps (``float_islands``,
``share_tied_table``); no code branches on a scheme's name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from albert_edge.errors import ConfigError

__all__ = [
    "Scheme", "CalibrationMethod", "Recipe", "RECIPES", "QuantizeConfig", "recipe_for", "schemes_for",
    "FORMATS", "TFLITE_COMPAT", "STATIC_VARIANTS", "static_variant", "AT_CONVERSION", "ADAPTIVE_SCHEMES",
]

FORMATS = ("onnx", "tflite")

# What a TFLite file may need: "2.14" writes only operator versions tflite-runtime 2.14 (the last
# tflite-runtime release, what Raspberry Pi OS bookworm installs) registers; "latest" lets the
# converter pick the newest ones (per-channel hybrid FULLY_CONNECTED needs runtime 2.17).
TFLITE_COMPAT = ("2.14", "latest")


class Scheme(str, Enum):
    """Every scheme name, whatever the format. Which format has which is RECIPES' business."""

    INT8_DYNAMIC = "int8-dynamic"
    INT8_STATIC = "int8-static"
    INT8_FULL = "int8-full"
    INT16X8 = "int16x8"
    FP16 = "fp16"

    def __str__(self) -> str:
        return self.value

    def file_suffix(self, suffix: str) -> str:
        """The suffix of this scheme's file of a file ending in ``suffix``: .onnx -> .int8-dynamic.onnx
        (model.onnx -> model.int8-dynamic.onnx; model.text.onnx -> model.int8-dynamic.text.onnx)."""
        return f".{self.value}{suffix}"


# The schemes of a file that stops early (convert --adaptive): the CPU's. The integer-only ones are
# for accelerators, which take static files, and a loop that ends on the data cannot be static.
ADAPTIVE_SCHEMES = (Scheme.INT8_DYNAMIC, Scheme.FP16)


class CalibrationMethod(str, Enum):
    """How activation ranges are read from the calibration batches (ONNX int8-static)."""

    MINMAX = "minmax"
    ENTROPY = "entropy"
    PERCENTILE = "percentile"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Recipe:
    """How one scheme is made for one format.

    ``weights`` is the precision the MatMul / FULLY_CONNECTED weights are stored in;
    ``activations`` says how activations are computed. ``calibration`` is whether real text
    must be run through the model to fix activation ranges.
    """

    format: str
    scheme: Scheme
    suffix: str
    weights: str
    activations: str
    calibration: bool = False
    calibration_methods: tuple[CalibrationMethod, ...] = (CalibrationMethod.MINMAX,)
    embeddings_option: bool = True  # whether --no-embeddings can keep the word embeddings float
    # ONNX: the builder in quantize/onnx.py.
    method: str = ""
    # TFLite: converter settings and the steps run on the converted flatbuffer.
    optimizations: bool = False
    supported_ops: tuple[str, ...] = ("TFLITE_BUILTINS",)
    supported_types: tuple[str, ...] = ()
    representative: bool = False
    float_islands: bool = False  # LayerNorm statistics and the attention-mask path run in float
    share_tied_table: bool = False  # the tied MLM decoder reads the embedding lookup's int8 table
    tied_per_tensor: bool = False  # per-tensor weight scales when the MLM decoder is tied
    share_input_ranges: bool = False  # the layer applications of a shared weight: one input range, one bias
    full_range_tables: bool = False  # embedding tables quantized over their whole range, not a calibrated one
    # ONNX: how the MLM decoder tied to the int8 word table reads it. "integer": its input
    # quantized at run time (DynamicQuantizeLinear + MatMulInteger, fast on a CPU); "dequantized":
    # a float Gemm over DequantizeLinear(table), operators NNAPI lists (a static file's variant).
    tied_decoder: str = "integer"
    notes: str = ""

    @property
    def rewrites(self) -> bool:
        """Whether the converted TFLite flatbuffer is rewritten after conversion."""
        return self.float_islands or self.share_tied_table or self.share_input_ranges or self.full_range_tables


_ALL_METHODS = tuple(CalibrationMethod)

# The one table: (format, scheme) -> recipe. Suffixes go between the model's stem and its
# format suffix: model.onnx -> model.int8-dynamic.onnx.
RECIPES: dict[tuple[str, Scheme], Recipe] = {
    ("onnx", Scheme.INT8_DYNAMIC): Recipe(
        "onnx", Scheme.INT8_DYNAMIC, ".int8-dynamic.onnx", weights="int8", method="dynamic",
        activations="int8, quantized at run time per tensor (DynamicQuantizeLinear)",
        notes="per-channel weights; attention score products stay float (they have no weights)",
    ),
    ("onnx", Scheme.INT8_STATIC): Recipe(
        "onnx", Scheme.INT8_STATIC, ".int8-static.onnx", weights="int8", method="static",
        activations="int8 QDQ around every MatMul/Gemm, ranges calibrated on real text",
        calibration=True, calibration_methods=_ALL_METHODS,
        notes="LayerNorm, softmax, GELU and the -10000 mask add stay float between the QDQ pairs",
    ),
    ("onnx", Scheme.FP16): Recipe(
        "onnx", Scheme.FP16, ".fp16.onnx", weights="float16", method="fp16",
        activations="float16 (inputs int64, outputs cast back to float32)", embeddings_option=False,
    ),
    ("tflite", Scheme.INT8_DYNAMIC): Recipe(
        "tflite", Scheme.INT8_DYNAMIC, ".int8-dynamic.tflite", weights="int8",
        activations="float, quantized on the fly inside each FULLY_CONNECTED (dynamic range)",
        optimizations=True, share_tied_table=True, embeddings_option=False,
        notes="the converter leaves weights under 1024 elements in float",
    ),
    ("tflite", Scheme.INT8_FULL): Recipe(
        "tflite", Scheme.INT8_FULL, ".int8-full.tflite", weights="int8",
        activations="int8, ranges calibrated on real text (representative dataset)",
        calibration=True, optimizations=True, representative=True, float_islands=True,
        share_tied_table=True, share_input_ranges=True, full_range_tables=True, embeddings_option=False,
    ),
    ("tflite", Scheme.INT16X8): Recipe(
        "tflite", Scheme.INT16X8, ".int16x8.tflite", weights="int8",
        activations="int16, ranges calibrated on real text",
        calibration=True, optimizations=True, representative=True, float_islands=True, tied_per_tensor=True,
        share_input_ranges=True, full_range_tables=True,
        supported_ops=("EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8", "TFLITE_BUILTINS"),
        embeddings_option=False,
        notes="the 16x8 quantizer stores a table read by GATHER (the embeddings) as int16; with a tied "
              "MLM decoder that one table serves both, and weights are scaled per tensor (its "
              "quantizer cannot give a shared table per-channel scales)",
    ),
    ("tflite", Scheme.FP16): Recipe(
        "tflite", Scheme.FP16, ".fp16.tflite", weights="float16",
        activations="float32 (weights dequantized once at load)",
        optimizations=True, supported_types=("float16",), embeddings_option=False,
    ),
}


# What a static-shape file (convert --static: [1, N] inputs, for a phone's NPU) is quantized with
# instead of the scheme's recipe: no operator NNAPI does not list (quantize/onnx.py picks it).
STATIC_VARIANTS: dict[tuple[str, Scheme], Recipe] = {
    ("onnx", Scheme.INT8_STATIC): replace(
        RECIPES[("onnx", Scheme.INT8_STATIC)], tied_decoder="dequantized",
        notes="static file for NNAPI: QDQ around every MatMul/Gemm with calibrated ranges; the tied MLM decoder "
              "is a float Gemm over the dequantized int8 word table (no run-time quantization)"),
}


# The quantized forms a target writes at conversion (``convert --scheme``), by target: the .pte
# quantized as it is lowered, the .ort converted from the int8 .onnx RECIPES makes, and the text
# file that .onnx behind the tokenizer. Each target's entry (albert_edge.converters.targets) names them.
AT_CONVERSION: dict[str, tuple[Scheme, ...]] = {
    "executorch": (Scheme.INT8_DYNAMIC,),
    "ort": (Scheme.INT8_DYNAMIC,),
    "onnx-text": (Scheme.INT8_DYNAMIC,),
}


def static_variant(recipe: Recipe) -> Recipe:
    """The recipe a static-shape file of ``recipe``'s format is quantized with (itself when it has none)."""
    return STATIC_VARIANTS.get((recipe.format, recipe.scheme), recipe)


def schemes_for(fmt: str) -> list[Scheme]:
    return [scheme for (f, scheme) in RECIPES if f == fmt]


def recipe_for(fmt: str, scheme: Scheme | str) -> Recipe:
    """The recipe of ``scheme`` for ``fmt``; ConfigError naming the schemes the format has."""
    known = schemes_for(fmt)
    if fmt == "ort":  # onnxruntime's optimized graph: quantized as .onnx, then converted
        raise ConfigError("an .ort file is quantized at conversion: albert-edge convert --to ort --scheme "
                          "int8-dynamic writes model.int8-dynamic.ort beside model.ort")
    if not known:
        raise ConfigError(f"unknown model format {fmt!r}; albert-edge quantizes {', '.join(FORMATS)}")
    try:
        scheme = Scheme(scheme)
    except ValueError:
        scheme = None
    if scheme is None or (fmt, scheme) not in RECIPES:
        raise ConfigError(f"scheme {str(scheme or '')!r} does not exist for {fmt}; "
                          f"{fmt} schemes: {', '.join(s.value for s in known)}")
    return RECIPES[(fmt, scheme)]


@dataclass(frozen=True)
class QuantizeConfig:
    """What to make and how to check it.

    ``calibration`` text files (or ``"builtin"``) and a ``tokenizer`` give the real sentences
    that calibrate static schemes and, held out from calibration, measure accuracy. Without a
    tokenizer (none given and none beside the source checkpoint) dynamic and fp16 schemes are
    measured on random ids, and say so. ``max_drop`` fails the run when the headline agreement
    (MLM top-1 or label agreement; the output cosine for heads without labels) is below
    ``1 - max_drop``. ``tflite_compat`` is the oldest TFLite runtime a .tflite file must load in
    ("2.14", the default, or "latest").
    """

    scheme: Scheme | str
    calibration: tuple[str | Path, ...] = ()
    tokenizer: str | Path | None = None
    calibration_method: CalibrationMethod | str = CalibrationMethod.MINMAX
    num_samples: int = 64
    eval_samples: int = 64
    quantize_embeddings: bool = True
    per_channel: bool = True
    max_drop: float | None = None
    seq_len: int | None = None  # default: the seq_len of the parent's manifest
    batch_size: int = 8
    num_threads: int | None = None
    seed: int = 0
    tflite_compat: str = "2.14"  # one of TFLITE_COMPAT

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "scheme", Scheme(self.scheme))
        except ValueError:
            raise ConfigError(f"unknown scheme {self.scheme!r}; schemes: "
                              f"{', '.join(s.value for s in Scheme)}") from None
        try:
            object.__setattr__(self, "calibration_method", CalibrationMethod(self.calibration_method))
        except ValueError:
            raise ConfigError(f"unknown calibration method {self.calibration_method!r}; methods: "
                              f"{', '.join(m.value for m in CalibrationMethod)}") from None
        if isinstance(self.calibration, (str, Path)):
            object.__setattr__(self, "calibration", (self.calibration,))
        for name in ("num_samples", "eval_samples", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} ({value!r}) must be a positive integer")
        if self.max_drop is not None and not 0.0 <= float(self.max_drop) <= 1.0:
            raise ConfigError(f"max_drop ({self.max_drop!r}) must be between 0 and 1")
        if self.seq_len is not None and (not isinstance(self.seq_len, int) or self.seq_len < 2):
            raise ConfigError(f"seq_len ({self.seq_len!r}) must be an integer of at least 2")
        if self.tflite_compat not in TFLITE_COMPAT:
            raise ConfigError(f"tflite_compat ({self.tflite_compat!r}) must be one of: {', '.join(TFLITE_COMPAT)}")

    def check_against(self, recipe: Recipe) -> None:
        """Options that the recipe cannot honour are bad input, not something to ignore."""
        if self.calibration_method not in recipe.calibration_methods:
            raise ConfigError(
                f"calibration method {self.calibration_method.value!r} is not available for "
                f"{recipe.format} {recipe.scheme.value}; it takes: "
                f"{', '.join(m.value for m in recipe.calibration_methods)}"
            )
        if not self.quantize_embeddings and not recipe.embeddings_option:
            raise ConfigError(
                f"--no-embeddings is not available for {recipe.format} {recipe.scheme.value}: "
                + ("fp16 stores every weight in float16"
                   if recipe.weights == "float16" else
                   "the TFLite converter always quantizes the embedding table")
            )
