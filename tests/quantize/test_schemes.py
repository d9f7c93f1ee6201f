"""The scheme table: every (format, scheme) the issue asks for, one recipe each, and options a
recipe cannot honour refused with one clear line."""

from __future__ import annotations

import pytest

from albert_edge.errors import ConfigError
from albert_edge.quantize.schemes import (
    FORMATS,
    RECIPES,
    CalibrationMethod,
    QuantizeConfig,
    Scheme,
    recipe_for,
    schemes_for,
)

WANTED = {
    "onnx": {"int8-dynamic", "int8-static", "fp16"},
    "tflite": {"int8-dynamic", "int8-full", "int16x8", "fp16"},
}


def test_the_table_has_exactly_the_schemes_of_the_issue():
    assert {fmt: {s.value for s in schemes_for(fmt)} for fmt in FORMATS} == WANTED
    for (fmt, scheme), recipe in RECIPES.items():
        assert recipe.format == fmt and recipe.scheme is scheme
        assert recipe.suffix == f".{scheme.value}.{fmt}"
    assert len({r.suffix for r in RECIPES.values()}) == len(RECIPES)


def test_scheme_is_a_str_enum():
    assert Scheme("int8-dynamic") == "int8-dynamic"
    assert str(Scheme.INT16X8) == "int16x8"
    assert issubclass(Scheme, str) and issubclass(CalibrationMethod, str)


def test_static_schemes_calibrate_and_onnx_static_has_three_methods():
    assert RECIPES[("onnx", Scheme.INT8_STATIC)].calibration_methods == tuple(CalibrationMethod)
    for key in (("onnx", Scheme.INT8_STATIC), ("tflite", Scheme.INT8_FULL), ("tflite", Scheme.INT16X8)):
        assert RECIPES[key].calibration
    for key in (("onnx", Scheme.INT8_DYNAMIC), ("onnx", Scheme.FP16), ("tflite", Scheme.FP16)):
        assert not RECIPES[key].calibration


def test_tflite_recipes_are_converter_settings():
    full = RECIPES[("tflite", Scheme.INT8_FULL)]
    assert full.optimizations and full.representative and full.float_islands and full.share_tied_table
    assert RECIPES[("tflite", Scheme.INT16X8)].supported_ops[0] == \
        "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8"
    assert RECIPES[("tflite", Scheme.FP16)].supported_types == ("float16",)
    assert all("SELECT_TF_OPS" not in op for r in RECIPES.values() for op in r.supported_ops)


@pytest.mark.parametrize("fmt, scheme", [("onnx", "int8-full"), ("onnx", "int16x8"), ("tflite", "int8-static"),
                                         ("onnx", "int4"), ("tflite", "")])
def test_a_scheme_the_format_lacks_is_one_clear_error(fmt, scheme):
    with pytest.raises(ConfigError, match=f"does not exist for {fmt}") as info:
        recipe_for(fmt, scheme)
    assert "\n" not in str(info.value)
    assert ", ".join(s.value for s in schemes_for(fmt)) in str(info.value)


def test_unknown_format():
    with pytest.raises(ConfigError, match="unknown model format"):
        recipe_for("coreml", "fp16")


@pytest.mark.parametrize("changes, match", [
    (dict(scheme="int3"), "unknown scheme"),
    (dict(calibration_method="mse"), "unknown calibration method"),
    (dict(max_drop=1.5), "max_drop"),
    (dict(max_drop=-0.1), "max_drop"),
    (dict(num_samples=0), "num_samples"),
    (dict(eval_samples=True), "eval_samples"),
    (dict(seq_len=1), "seq_len"),
])
def test_config_validates_its_values(changes, match):
    with pytest.raises(ConfigError, match=match):
        QuantizeConfig(**{"scheme": "int8-dynamic", **changes})


def test_config_normalizes_names():
    config = QuantizeConfig("int8-static", calibration="a.txt", calibration_method="entropy")
    assert config.scheme is Scheme.INT8_STATIC and config.calibration_method is CalibrationMethod.ENTROPY
    assert config.calibration == ("a.txt",)


@pytest.mark.parametrize("fmt, scheme, changes, match", [
    ("tflite", "int8-full", dict(calibration_method="entropy"), "not available for tflite int8-full"),
    ("onnx", "int8-dynamic", dict(calibration_method="percentile"), "not available"),
    ("tflite", "int8-dynamic", dict(quantize_embeddings=False), "--no-embeddings is not available"),
    ("onnx", "fp16", dict(quantize_embeddings=False), "float16"),
])
def test_options_a_recipe_cannot_honour_are_refused(fmt, scheme, changes, match):
    config = QuantizeConfig(scheme, **changes)
    with pytest.raises(ConfigError, match=match):
        config.check_against(recipe_for(fmt, config.scheme))


def test_options_a_recipe_honours_pass():
    QuantizeConfig("int8-static", calibration_method="percentile").check_against(recipe_for("onnx", "int8-static"))
    QuantizeConfig("int8-dynamic", quantize_embeddings=False).check_against(recipe_for("onnx", "int8-dynamic"))
