"""Each quantization recipe's graph rewrites are an ordered list of named passes."""

from __future__ import annotations

import numpy as np
import pytest

from albert_edge.quantize.schemes import RECIPES, Scheme

pytest.importorskip("onnx")


def test_onnx_recipes_list_their_passes():
    from albert_edge.quantize import onnx as onnx_quantize

    assert set(onnx_quantize._PASSES) == set(onnx_quantize._BUILDERS)
    names = {scheme: [p.name for p in onnx_quantize._PASSES[recipe.method](4)]
             for (fmt, scheme), recipe in RECIPES.items() if fmt == "onnx"}
    assert names == {Scheme.INT8_DYNAMIC: ["self-attention as MultiHeadAttention",
                                           "residual Add before LayerNormalization as Sum"],
                     Scheme.INT8_STATIC: [], Scheme.FP16: []}


def test_tflite_recipes_list_their_passes_in_order():
    from albert_edge.quantize.tflite import _passes, _rewrite

    names = {scheme: [p.name for p in _passes(recipe, [], [])]
             for (fmt, scheme), recipe in RECIPES.items() if fmt == "tflite"}
    assert names == {
        Scheme.INT8_DYNAMIC: ["tied MLM decoder reads the lookup's table"],
        Scheme.INT8_FULL: ["embedding tables over their whole range", "tied MLM decoder reads the lookup's table",
                           "float islands", "one input range per shared weight"],
        Scheme.INT16X8: ["embedding tables over their whole range", "float islands",
                         "one input range per shared weight"],
        Scheme.FP16: [],
    }
    assert all(bool(names[r.scheme]) == r.rewrites for (fmt, _), r in RECIPES.items() if fmt == "tflite")
    flatbuffer = np.arange(8, dtype=np.uint8).tobytes()
    assert _rewrite(flatbuffer, []) is flatbuffer  # no pass: the converter's bytes as they are
