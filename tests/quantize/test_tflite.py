"""TFLite schemes, rebuilt from the source checkpoint the manifest names: each file runs in the
LiteRT interpreter with builtin ops only, stores every weight of its parent once (the tied
embedding table included, which the converter alone writes twice), keeps no FULLY_CONNECTED
weight in float, and stays close to its parent on held-out text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from albert_edge.formats import manifest as manifest_io
from albert_edge.formats.op_versions import TFLITE_RUNTIME_LAST, min_runtime, op_versions, too_new_for, version_key
from albert_edge.formats.tflite_reader import read
from albert_edge.errors import ConversionError
from albert_edge.converters.quantized import quantize_file
from albert_edge.quantize import QuantizeConfig
from albert_edge.quantize.checks import check_quantized, float_weights
from albert_edge.runtime import Session

from .conftest import CORPUS, feeds

pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

TEXT = dict(calibration=(str(CORPUS),), num_samples=24, eval_samples=32)

CASES = {  # scheme: (min cosine, min MLM top-1 agreement, dtype of the tied table)
    "int8-dynamic": (0.99, 0.85, "int8"),
    "int8-full": (0.98, 0.8, "int8"),
    "int16x8": (0.99, 0.85, "int16"),
    "fp16": (0.9999, 0.95, "float16"),
}


@pytest.mark.parametrize("scheme", CASES)
def test_scheme(workdir, scheme):
    min_cosine, min_agreement, table_dtype = CASES[scheme]
    out = workdir / f"model.{scheme}.tflite"
    result = quantize_file(workdir / "model.tflite", QuantizeConfig(scheme, **TEXT), out)
    assert result.kept and out.is_file()
    assert result.size < 0.75 * result.parent_size

    # it runs in the LiteRT interpreter, builtin ops only, at another length than it was built for
    session = Session(out)
    assert session.backend_name == "ai_edge_litert"
    got = session.run(feeds(seq=20))["prediction_logits"]
    assert got.shape == (2, 20, 400) and np.isfinite(got).all()
    contents = read(out)
    assert not any(op in ("CUSTOM", "FlexDelegate") or op.startswith("Flex") for op in contents.ops)

    # once: every parent weight stored exactly once; the tied table once, in the scheme's type
    assert result.check.ok, result.check.problems
    assert all(len(c.stored_as) == 1 for c in result.check.copies) and len(result.check.copies) >= 14
    tables = [w for w in contents.weights if w.shape == (400, 32)]
    assert [w.dtype for w in tables] == [table_dtype]
    # complete: no FULLY_CONNECTED / BATCH_MATMUL reads a float32 weight
    assert all(w.dtype == "float16" for w in float_weights(out)) if scheme == "fp16" else not float_weights(out)

    logits = result.accuracy.outputs[0]
    print(scheme, logits.row())
    assert logits.cosine_mean >= min_cosine and logits.agreement >= min_agreement
    entry = manifest_io.read(workdir).file(out.name)
    assert entry.precision == scheme

    # by default it loads in tflite-runtime 2.14, and the manifest says what it needs
    ops = op_versions(out)
    assert not too_new_for(ops, TFLITE_RUNTIME_LAST), [o for o in too_new_for(ops, TFLITE_RUNTIME_LAST)]
    assert entry.min_runtime == min_runtime(ops)
    assert version_key(entry.min_runtime) <= version_key(TFLITE_RUNTIME_LAST)
    parent = manifest_io.read(workdir).file("model.tflite")
    assert parent.min_runtime == min_runtime(op_versions(workdir / "model.tflite"))


def test_latest_keeps_per_channel_dynamic_range_weights(workdir):
    """--tflite-compat latest: the converter's per-channel hybrid FULLY_CONNECTED (version 12),
    which only runtimes from 2.17 load; the default writes one scale per tensor instead."""
    from albert_edge.formats.tflite_model import load

    def scales(path):
        model = load(path.read_bytes())
        return {len(model.graph.tensors[op.inputs[1]].quantization.scale) for op in model.graph.operators
                if model.op_name(op) == "FULLY_CONNECTED"}

    latest = workdir / "latest.tflite"
    result = quantize_file(workdir / "model.tflite", QuantizeConfig("int8-dynamic", tflite_compat="latest", **TEXT), latest)
    assert result.kept and result.check.ok, result.check.problems
    fc = [o for o in op_versions(latest) if o.op == "FULLY_CONNECTED"]
    assert [(o.version, o.min_runtime) for o in fc] == [(12, "2.17.0")]
    assert manifest_io.read(workdir).file(latest.name).min_runtime == "2.17.0"
    assert max(scales(latest)) > 1

    default = workdir / "default.tflite"
    result = quantize_file(workdir / "model.tflite", QuantizeConfig("int8-dynamic", **TEXT), default)
    assert any("per tensor" in note for note in result.notes)
    assert scales(default) == {1}
    assert [o.version for o in op_versions(default) if o.op == "FULLY_CONNECTED"] == [5]


def test_the_converter_alone_stores_the_tied_table_twice(workdir, trained_checkpoint):
    """Dynamic-range conversion quantizes the word embeddings per tensor for the GATHER and per
    channel for the tied FULLY_CONNECTED: two int8 tables with different bytes, which only the
    value check sees. quantize_file() points the decoder at the GATHER's table instead."""
    import tensorflow as tf

    from albert_edge import checkpoints
    from albert_edge.converters import tflite as exporter

    _, model = checkpoints.load_model(trained_checkpoint)

    def dynamic_range(converter):
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        return converter.convert()

    naive = workdir / "naive.tflite"
    naive.write_bytes(exporter.convert(model, seq_len=32, run_converter=dynamic_range, runtime=None))
    assert [w.dtype for w in read(naive).weights if w.shape == (400, 32)] == ["int8", "int8"]
    check = check_quantized(naive, workdir / "model.tflite", {}, feeds(1))
    assert any("word_embeddings" in p or "stored 2 times" in p for p in check.problems)


def test_int16x8_without_float_layernorm_does_not_run(workdir, trained_checkpoint):
    """What the float islands are for: the converter quantizes LayerNorm's SQUARED_DIFFERENCE
    to int16, which the interpreter has no kernel for."""
    import tensorflow as tf

    from albert_edge import checkpoints
    from albert_edge.converters import tflite as exporter
    from albert_edge.quantize.tflite import _examples

    _, model = checkpoints.load_model(trained_checkpoint)
    from albert_edge.quantize.calibration import random_batches

    def int16x8(converter):
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8, tf.lite.OpsSet.TFLITE_BUILTINS]
        converter.representative_dataset = lambda: _examples(random_batches(400, 32, 4, 2))
        converter._experimental_disable_per_channel = True
        return converter.convert()

    naive = workdir / "naive.tflite"
    naive.write_bytes(exporter.convert(model, seq_len=32, run_converter=int16x8, runtime=None,
                                          layers="unrolled"))  # as int8-full and int16x8 write it
    check = check_quantized(naive, workdir / "model.tflite", {}, feeds(1))
    assert any("does not run" in p for p in check.problems)


def test_a_tflite_file_without_its_checkpoint_cannot_be_rebuilt(workdir, tmp_path, trained_checkpoint):
    """The manifest's source checkpoint is what a TFLite scheme converts again."""
    import json

    manifest = json.loads((workdir / "manifest.json").read_text())
    manifest["source"]["checkpoint"] = str(tmp_path / "gone")
    (workdir / "manifest.json").write_text(json.dumps(manifest))
    config = QuantizeConfig("int8-dynamic", tokenizer=workdir / "spiece.model", **TEXT)
    (workdir / "spiece.model").write_bytes((trained_checkpoint / "spiece.model").read_bytes())
    with pytest.raises(ConversionError, match="no longer exists"):
        quantize_file(workdir / "model.tflite", config, workdir / "q.tflite")
    assert not (workdir / "q.tflite").exists()


def test_full_integer_biases_are_stored_once(workdir):
    """With integer activations each layer application of a shared weight gets its own int32
    bias (in units of its own input scale): L copies, unless the applications share one input
    range, as int8-full's recipe does."""
    import dataclasses

    from albert_edge.quantize import schemes
    from albert_edge.quantize.calibration import prepare
    from albert_edge.quantize.source import open_model_file
    from albert_edge.converters.tflite_quantized import build

    source = open_model_file(workdir / "model.tflite")
    config = QuantizeConfig("int8-full", **TEXT)
    recipe = schemes.RECIPES[("tflite", schemes.Scheme.INT8_FULL)]
    assert recipe.share_input_ranges
    text = prepare(config, source, recipe, 32)
    without = dataclasses.replace(recipe, share_input_ranges=False)
    build(source, workdir / "per-layer.tflite", without, config, text.calibration)
    check = check_quantized(workdir / "per-layer.tflite", workdir / "model.tflite", {}, feeds(1))
    biases = [p for p in check.problems if "stored 2 times" in p and "int32" in p]
    assert len(biases) >= 6, check.problems  # Q, K, V, dense, ffn, ffn_output biases of each group
    build(source, workdir / "shared.tflite", recipe, config, text.calibration)
    assert check_quantized(workdir / "shared.tflite", workdir / "model.tflite", {}, feeds(1)).ok


def _softmax_outputs(path, feeds_):
    """Every attention softmax's output (dequantized), by tensor name, after one real run."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True)
    interpreter.get_signature_runner()(**{k: v.astype(np.int32) for k, v in feeds_.items()})
    out = {}
    for detail in interpreter.get_tensor_details():
        name = detail["name"].removesuffix("/float")
        if name.startswith("Softmax") and ";" not in name:
            value = interpreter.get_tensor(detail["index"]).astype(np.float64)
            q = detail["quantization_parameters"]
            if len(q["scales"]):
                value = (value - q["zero_points"][0]) * q["scales"][0]
            out[name] = value
    return out


@pytest.mark.parametrize("scheme", ["int8-full", "int16x8"])
def test_attention_survives_integer_activations(converted_unrolled, tmp_path, scheme):
    """The converter gives the scaled attention scores the range of the sum they feed, -10000
    mask included: in int8 every score rounds to zero and attention turns uniform. The float
    island keeps them, the mask and the softmax in float. (From an unrolled parent: every
    application's softmax is a tensor of the main graph.)"""
    from .conftest import copy_dir

    workdir = copy_dir(converted_unrolled, tmp_path / "model")
    out = workdir / f"{scheme}.tflite"
    quantize_file(workdir / "model.tflite", QuantizeConfig(scheme, **TEXT), out)
    batch = feeds(1, seed=3)
    want, got = _softmax_outputs(workdir / "model.tflite", batch), _softmax_outputs(out, batch)
    assert len(want) == 4 and want.keys() == got.keys()  # one softmax per layer application
    for name, probs in want.items():
        a, b = probs.reshape(-1), got[name].reshape(-1)
        assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.99, name


def _converted_as(tmp_path_factory, checkpoint, layers: str) -> Path:
    from albert_edge.converters.export import convert

    from .conftest import SEQ

    out = tmp_path_factory.mktemp(layers) / "fp32"
    convert(checkpoint, out, targets=("tflite",), seq_len=SEQ, layers=layers)
    return out


@pytest.fixture(scope="module")
def converted_loop(tmp_path_factory, trained_checkpoint):
    """The trained MLM as model.tflite in the loop form (convert's default, --layers loop)."""
    return _converted_as(tmp_path_factory, trained_checkpoint, "loop")


@pytest.fixture(scope="module")
def converted_unrolled(tmp_path_factory, trained_checkpoint):
    """The trained MLM as model.tflite unrolled (convert --layers unrolled)."""
    return _converted_as(tmp_path_factory, trained_checkpoint, "unrolled")


@pytest.mark.parametrize("scheme", ["int8-dynamic", "fp16"])
def test_a_loop_file_stays_a_loop_and_keeps_its_accuracy(converted_loop, tmp_path, scheme):
    """int8-dynamic and fp16 rebuild the loop form, its body's weights stored once and quantized
    (the tied table rewrite and the buffer clean-up see every subgraph), as close to the parent as
    the unrolled file's."""
    from albert_edge.formats.tflite_reader import layer_form

    from .conftest import copy_dir

    work = copy_dir(converted_loop, tmp_path / "model")
    out = work / f"model.{scheme}.tflite"
    result = quantize_file(work / "model.tflite", QuantizeConfig(scheme, **TEXT), out)
    assert result.kept and result.check.ok, result.check.problems
    assert layer_form(out) == "loop" and read(out).ops["WHILE"] == 2  # G=2 groups of 2
    assert all(len(c.stored_as) == 1 for c in result.check.copies) and len(result.check.copies) >= 14, \
        [(c.name, c.stored_as) for c in result.check.copies if len(c.stored_as) != 1]
    assert all(w.dtype == "float16" for w in float_weights(out)) if scheme == "fp16" else not float_weights(out)
    min_cosine, min_agreement, _ = CASES[scheme]
    logits = result.accuracy.outputs[0]
    assert logits.cosine_mean >= min_cosine and logits.agreement >= min_agreement
    session = Session(out)
    for seq in (20, 32, 9):  # one session, one length after another
        assert np.isfinite(session.run(feeds(seq=seq))["prediction_logits"]).all()


def test_a_scheme_that_rewrites_the_layers_writes_them_unrolled(converted_loop, tmp_path):
    """int8-full's rewrites read one graph: from a loop parent it writes the unrolled form, says so,
    and keeps its accuracy."""
    from albert_edge.formats.tflite_reader import layer_form

    from .conftest import copy_dir

    work = copy_dir(converted_loop, tmp_path / "model")
    out = work / "model.int8-full.tflite"
    result = quantize_file(work / "model.tflite", QuantizeConfig("int8-full", **TEXT), out)
    assert result.kept and result.check.ok, result.check.problems
    assert layer_form(out) == "unrolled" and "WHILE" not in read(out).ops
    assert any(note.startswith("written unrolled: the int8-full rewrites") for note in result.notes), result.notes
    min_cosine, min_agreement, _ = CASES["int8-full"]
    logits = result.accuracy.outputs[0]
    assert logits.cosine_mean >= min_cosine and logits.agreement >= min_agreement


def test_quantize_alone_refuses_a_tflite_and_names_the_call_that_converts_it_again(workdir):
    """quantize never imports the converters: a .tflite is converted again from its model, and only
    the orchestrator above both (converters.quantized.quantize_file) brings that builder."""
    from albert_edge.errors import ConfigError
    from albert_edge.quantize import quantize

    with pytest.raises(ConfigError, match="quantize_file"):
        quantize(workdir / "model.tflite", QuantizeConfig("int8-dynamic", **TEXT), workdir / "q.tflite")
    assert not (workdir / "q.tflite").exists()
