"""ONNX schemes on a tiny ALBERT that has learned something: each file runs in onnxruntime,
stores every weight of its parent once, keeps no MatMul/Gemm weight in float unasked, and stays
close to its parent on held-out text. Plus the ways naive quantization goes wrong, each shown
to be caught."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from albert_edge.formats import manifest as manifest_io
from albert_edge.formats.weights import analyze, read_file
from albert_edge.quantize import QuantizeConfig, quantize
from albert_edge.quantize.checks import UNEXPECTED, check_quantized, float_weights
from albert_edge.runtime import Session

from .conftest import CORPUS, feeds

pytest.importorskip("onnxruntime")

TEXT = dict(calibration=(str(CORPUS),), num_samples=32, eval_samples=32)

CASES = {
    "int8-dynamic": (dict(scheme="int8-dynamic"), 0.99, 0.85),
    "int8-static-minmax": (dict(scheme="int8-static"), 0.98, 0.8),
    "int8-static-entropy": (dict(scheme="int8-static", calibration_method="entropy"), 0.98, 0.8),
    "int8-static-percentile": (dict(scheme="int8-static", calibration_method="percentile"), 0.98, 0.8),
    "fp16": (dict(scheme="fp16"), 0.9999, 0.95),
}


@pytest.mark.parametrize("case", CASES)
def test_scheme(workdir, case):
    options, min_cosine, min_agreement = CASES[case]
    result = quantize(workdir / "model.onnx", QuantizeConfig(**options, **TEXT), workdir / f"{case}.onnx")
    out = workdir / f"{case}.onnx"
    assert result.kept and out.is_file() and result.out_path == out
    assert not list(workdir.glob(".*.tmp*"))

    # it runs in onnxruntime, with the parent's outputs
    session = Session(out)
    got = session.run(feeds())["prediction_logits"]
    want = Session(workdir / "model.onnx").run(feeds())["prediction_logits"]
    assert got.shape == want.shape and np.isfinite(got).all()

    # once: every weight of the parent is stored exactly once, no byte duplicates
    assert result.check.ok, result.check.problems
    assert result.check.copies and all(len(c.stored_as) == 1 for c in result.check.copies)
    assert not analyze(read_file(out)).duplicates
    # complete: no MatMul/Gemm reads a float32 weight
    assert all(w.dtype == "float16" for w in float_weights(out)) if case == "fp16" else not float_weights(out)

    # accuracy against the parent, on held-out real text
    logits = result.accuracy.outputs[0]
    assert logits.name == "prediction_logits" and logits.agreement_of == "MLM top-1"
    print(case, logits.row())
    assert logits.cosine_mean >= min_cosine and logits.agreement >= min_agreement
    assert "held-out sentences of corpus.txt" in result.accuracy.text

    # the manifest beside it records the file, its scheme and its accuracy
    entry = manifest_io.read(workdir).file(out.name)
    assert entry.precision == options["scheme"] and entry.sha256 == manifest_io.sha256_of(out)
    assert entry.parity["parent"] == "model.onnx" and entry.parity["accuracy"]["headline"] == logits.agreement
    assert entry.weights["float_weights"] == [] or case == "fp16"


def test_int8_stores_the_weights_in_int8(workdir):
    quantize(workdir / "model.onnx", QuantizeConfig("int8-dynamic", **TEXT), workdir / "q.onnx")
    parent, quantized = read_file(workdir / "model.onnx"), read_file(workdir / "q.onnx")
    matrices = sum(w.data.size for w in parent.weights if w.data.ndim == 2 and w.dtype == "float32")
    int8 = sum(w.nbytes for w in quantized.weights if w.dtype == "int8" and w.data.ndim == 2)
    assert int8 == matrices  # every matrix and every embedding table, one byte per element
    tables = [w for w in quantized.weights if w.shape == (400, 32)]
    assert [w.dtype for w in tables] == ["int8"]  # the tied table once, for lookup and decoder


def test_no_embeddings_keeps_the_tied_table_float_and_says_why(workdir):
    config = QuantizeConfig("int8-dynamic", quantize_embeddings=False, **TEXT)
    result = quantize(workdir / "model.onnx", config, workdir / "q.onnx")
    assert result.check.ok
    [table] = result.check.float_weights
    assert table.shape == (400, 32) and table.dtype == "float32" and "--no-embeddings" in table.reason
    assert all(len(c.stored_as) == 1 for c in result.check.copies)


@pytest.mark.parametrize("per_channel", [True, False])
def test_per_channel_or_per_tensor_scales(workdir, per_channel):
    result = quantize(workdir / "model.onnx", QuantizeConfig("int8-dynamic", per_channel=per_channel, **TEXT),
                      workdir / "q.onnx")
    assert result.check.ok
    graph = onnx.load(str(workdir / "q.onnx")).graph
    concats = {n.output[0]: list(n.input) for n in graph.node if n.op_type == "Concat"}  # packed Q, K, V
    weights = {w for n in graph.node if n.op_type == "MatMulInteger" for w in concats.get(n.input[1], [n.input[1]])}
    scales = [numpy_helper.to_array(t) for t in graph.initializer
              if t.name.endswith("_scale") and t.name.removesuffix("_scale") + "_quantized" in weights]
    assert len(scales) == 12 + 2  # per group: Q, K, V, dense, ffn, ffn_output; E->H; the MLM transform
    assert all((s.size > 1) == per_channel for s in scales)


@pytest.mark.parametrize("scheme,fused", [("int8-dynamic", True), ("fp16", False)])
def test_int8_dynamic_runs_each_attention_as_one_node(workdir, scheme, fused):
    """int8-dynamic files compute attention in onnxruntime's MultiHeadAttention, one node per
    layer application reading the int8 Q, K, V products; fp16 keeps the exporter's graph."""
    result = quantize(workdir / "model.onnx", QuantizeConfig(scheme, **TEXT), workdir / "q.onnx")
    assert result.check.ok
    graph = onnx.load(str(workdir / "q.onnx")).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("MultiHeadAttention") == (4 if fused else 0)  # L = 4
    assert ops.count("Softmax") == (0 if fused else 4)
    if not fused:
        return
    producers = {o: n for n in graph.node for o in n.output}
    inits = {t.name for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "MultiHeadAttention":
            # Q, K, V: one Split of one int8 product, whose weight is a Concat of the three
            # stored int8 weights (folded once at load), each under its own name
            (split,) = {producers[i].name: producers[i] for i in node.input[:3]}.values()
            assert split.op_type == "Split"
            chain = producers[split.input[0]]
            while chain.op_type != "MatMulInteger":
                chain = producers[chain.input[0]]
            concat = producers[chain.input[1]]
            assert concat.op_type == "Concat" and len(concat.input) == 3 and set(concat.input) <= inits
            assert all(graph_init.endswith("weight_t_quantized") for graph_init in concat.input)


def test_an_apps_default_session_keeps_layer_norm_unfused(workdir, tmp_path):
    """int8-dynamic writes the residual sums a LayerNormalization reads as Sum, so onnxruntime with
    its default options (an app's session) does not fuse them into its slow SkipLayerNormalization."""
    import onnxruntime as ort

    quantize(workdir / "model.onnx", QuantizeConfig("int8-dynamic", **TEXT), tmp_path / "q.onnx")
    graph = onnx.load(str(tmp_path / "q.onnx")).graph
    producers = {o: n for n in graph.node for o in n.output}
    norms = [n for n in graph.node if n.op_type == "LayerNormalization"]
    reads = sorted(producers[n.input[0]].op_type for n in norms)
    # the embeddings' sum and two residuals per layer application (L = 4); the MLM head's reads its GELU
    assert reads == ["Gelu"] + ["Sum"] * (1 + 2 * 4)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "q.optimized.onnx")
    ort.InferenceSession(str(tmp_path / "q.onnx"), options, providers=["CPUExecutionProvider"])
    ran = [n.op_type for n in onnx.load(str(tmp_path / "q.optimized.onnx")).graph.node]
    assert "SkipLayerNormalization" not in ran and ran.count("LayerNormalization") == len(norms)


def test_one_product_for_q_k_v_gives_the_three_products(workdir, monkeypatch):
    """The packed Q, K, V product against the three products it replaces, on the same file:
    the same weights, so the same results up to how the activations' int8 rounding falls."""
    import albert_edge.quantize.onnx as quantize_onnx
    from albert_edge.quantize.onnx_graph import pack_attention_inputs

    monkeypatch.setattr(quantize_onnx, "pack_attention_inputs", lambda model: 0)
    quantize(workdir / "model.onnx", QuantizeConfig("int8-dynamic", **TEXT), workdir / "three.onnx")
    model = onnx.load(str(workdir / "three.onnx"))
    assert pack_attention_inputs(model) == 4  # L = 4 applications of G = 2 groups
    onnx.save(model, str(workdir / "one.onnx"))
    sizes = {t.name: t.ByteSize() for t in onnx.load(str(workdir / "three.onnx")).graph.initializer}
    assert {t.name: t.ByteSize() for t in model.graph.initializer if t.name in sizes} == sizes  # none copied
    parent = Session(workdir / "model.onnx").run(feeds())["prediction_logits"]
    three = Session(workdir / "three.onnx").run(feeds())["prediction_logits"]
    one = Session(workdir / "one.onnx").run(feeds())["prediction_logits"]
    error = np.abs(three - parent).max()
    print("max |int8 - fp32|", error, "max |one - three|", np.abs(one - three).max())
    assert np.abs(one - three).max() <= error and np.abs(one - parent).max() <= 1.5 * error


def test_onnxruntime_alone_breaks_the_tied_table_and_the_check_says_so(workdir):
    """quantize_dynamic turns the tied decoder's Gemm(transB=1) into a MatMul by transposing the
    shared initializer in place: the embedding Gather then reads a transposed table."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    naive = workdir / "naive.onnx"
    quantize_dynamic(str(workdir / "model.onnx"), str(naive), weight_type=QuantType.QInt8)
    table = [t for t in onnx.load(str(naive)).graph.initializer if "word_embeddings.weight_quantized" in t.name]
    assert [list(t.dims) for t in table] == [[32, 400]]  # transposed, under the Gather's feet
    check = check_quantized(naive, workdir / "model.onnx", {}, feeds(1))
    assert not check.ok and "does not load" in check.problems[0]


def test_excluding_the_decoder_does_not_save_it_from_onnxruntime(workdir):
    """Even with the tied Gemm excluded and only MatMuls asked for, quantize_dynamic rewrites
    every Gemm first, transposing the shared table in place."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    naive = workdir / "naive.onnx"
    gemms = [n.name for n in onnx.load(str(workdir / "model.onnx")).graph.node if n.op_type == "Gemm"]
    quantize_dynamic(str(workdir / "model.onnx"), str(naive), weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"], nodes_to_exclude=gemms)
    assert not check_quantized(naive, workdir / "model.onnx", {}, feeds(1)).ok


def test_a_float_decoder_nobody_asked_for_fails_the_check(workdir):
    """The file --no-embeddings makes is fine with the reason the quantizer gives; checked as if
    nobody had asked for it, its float32 decoder weight is a failure, and inspect (which has no
    quantizer to ask) says why it is float."""
    quantize(workdir / "model.onnx", QuantizeConfig("int8-dynamic", quantize_embeddings=False, **TEXT),
             workdir / "q.onnx")
    check = check_quantized(workdir / "q.onnx", workdir / "model.onnx", {}, feeds(1))
    assert [(w.op, w.shape, w.reason) for w in check.float_weights] == [("MatMul", (400, 32), UNEXPECTED)]
    assert not check.ok
    [inferred] = float_weights(workdir / "q.onnx")
    assert "word-embedding table" in inferred.reason


def test_a_shared_weight_quantized_per_use_is_caught(workdir):
    """A quantizer that quantizes a shared weight once per layer writes copies that differ in
    scale, so no byte comparison sees them; the value check does."""
    quantize(workdir / "model.onnx", QuantizeConfig("int8-dynamic", **TEXT), workdir / "q.onnx")
    model = onnx.load(str(workdir / "q.onnx"))
    graph = model.graph
    readers = {}
    for node in graph.node:
        if node.op_type == "MatMulInteger":
            readers.setdefault(node.input[1], []).append(node)
    stored = {t.name for t in graph.initializer}  # (Q, K, V read a Concat of theirs)
    name, nodes = next((n, r) for n, r in readers.items() if len(r) > 1 and n in stored)  # read by two layers
    weight = numpy_helper.to_array(next(t for t in graph.initializer if t.name == name))
    copy = np.clip(np.rint(weight.astype(np.float32) * 0.9), -127, 127).astype(np.int8)  # another scale
    graph.initializer.append(numpy_helper.from_array(copy, name + "_layer2"))
    nodes[1].input[1] = name + "_layer2"
    onnx.save(model, str(workdir / "per-use.onnx"))
    assert not analyze(read_file(workdir / "per-use.onnx")).duplicates  # invisible to bytes
    check = check_quantized(workdir / "per-use.onnx", workdir / "model.onnx", {}, feeds(1))
    assert any("stored 2 times" in p for p in check.problems)


def test_albert_base_int8_with_embeddings_fits_12_5_mb(tmp_path):
    """ALBERT-base shape, MLM head (embeddings tied to the decoder). Two layer applications of
    the one shared group: the stored weights are those of any depth, and a per-use copy would
    double them."""
    import torch

    from albert_edge.config import AlbertConfig
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model

    torch.manual_seed(0)
    config = AlbertConfig.preset("albert-base-v2").replace(num_hidden_layers=2, max_position_embeddings=512)
    convert(build_model(config, "mlm"), tmp_path / "base", targets=("onnx",), seq_len=8)
    result = quantize(tmp_path / "base" / "model.onnx", QuantizeConfig("int8-dynamic", eval_samples=2, seq_len=8))
    assert result.kept and result.check.ok
    assert result.size <= 12.5e6, result.size
    assert "random ids" in result.accuracy.text  # no tokenizer known: it says so


def test_the_inspect_view(workdir):
    """What `albert-edge inspect` can show for a quantized file: bytes per precision, what stays
    float and why, and (through the manifest) each parent weight's copies."""
    from albert_edge.quantize import describe

    quantize(workdir / "model.onnx", QuantizeConfig("int8-dynamic", quantize_embeddings=False, **TEXT),
             workdir / "q.onnx")
    view = describe(workdir / "q.onnx")
    assert view["parent"] == "model.onnx" and view["weights_checked"] >= 14 and view["stored_more_than_once"] == {}
    assert view["weight_bytes_by_dtype"]["int8"] > 0 and view["unexpected_float_weights"] == 0
    [table] = view["float_weights"]
    assert "--no-embeddings" in table["reason"]  # from the manifest: the reason the quantizer gave
    fp32 = describe(workdir / "model.onnx")
    assert fp32["unexpected_float_weights"] == 0 and "parent" not in fp32
    assert {w["reason"] for w in fp32["float_weights"]} == {"fp32 file: nothing in it is quantized"}


def test_calibration_methods_give_their_own_ranges(workdir):
    """Entropy and percentile must not silently fall back to min/max (onnxruntime's
    quantize_static alone does, for entropy, with its default bin counts)."""
    scales = {}
    for method in ("minmax", "entropy", "percentile"):
        out = workdir / f"{method}.onnx"
        quantize(workdir / "model.onnx", QuantizeConfig("int8-static", calibration_method=method, **TEXT), out)
        graph = onnx.load(str(out)).graph
        q_inputs = {n.input[1] for n in graph.node if n.op_type == "QuantizeLinear"}
        scales[method] = {t.name: float(numpy_helper.to_array(t)) for t in graph.initializer if t.name in q_inputs}
    assert scales["minmax"].keys() == scales["entropy"].keys() == scales["percentile"].keys()
    n = len(scales["minmax"])
    narrower = sum(scales["entropy"][k] < 0.999 * scales["minmax"][k] for k in scales["minmax"])
    # clipping outliers narrows ranges; a silent fall-back to min/max narrows none (how many depends
    # on the calibration text's tokenization: 14 of 68 with ALBERT's user-defined pieces)
    assert narrower >= n // 8
    # the 99.999th percentile of a few thousand values is within a hair of their extreme
    differ = sum(scales["percentile"][k] != scales["minmax"][k] for k in scales["minmax"])
    assert differ >= n // 4
