"""int8 for a phone's NPU: the int8-static (QDQ) file of a static [1, N] .onnx takes NNAPI in one
partition covering every node (onnxruntime's own checker), stores each weight once and stays
close to its fp32 parent on held-out real text, measured as quantize measures; the int8-dynamic
file beside it is CPU-only by construction."""

from __future__ import annotations

import pytest

from albert_edge.formats.mobile_partitions import mobile_partitions
from albert_edge.quantize import QuantizeConfig, quantize
from albert_edge.quantize.accuracy import measure
from albert_edge.quantize.calibration import prepare
from albert_edge.quantize.checks import check_quantized
from albert_edge.quantize.onnx import build
from albert_edge.quantize.schemes import STATIC_VARIANTS, recipe_for
from albert_edge.quantize.source import open_model_file
from albert_edge.quantize.static_text import for_static
from albert_edge.runtime import Session

from .conftest import CORPUS, SEQ

pytest.importorskip("onnxruntime")

# Operators NNAPI does not list that the CPU recipes write: none may be in the NPU file.
CPU_ONLY = ("DynamicQuantizeLinear", "MatMulInteger", "MultiHeadAttention", "Sum", "DynamicQuantizeMatMul")


@pytest.fixture(scope="module")
def static_int8(tmp_path_factory, trained_checkpoint):
    """The trained MLM converted --static, and its int8-static file made and measured as quantize
    makes and measures it (calibration and held-out text padded to N, each row on its own)."""
    import onnx

    from albert_edge.converters.export import convert

    out = tmp_path_factory.mktemp("npu") / "static"
    convert(trained_checkpoint, out, targets=("onnx",), seq_len=SEQ, static=True)
    source = open_model_file(out / "model.onnx")
    assert source.entry.static_len == SEQ
    recipe = recipe_for("onnx", "int8-static")
    config = QuantizeConfig("int8-static", calibration=(str(CORPUS),), num_samples=32, eval_samples=32)
    text = for_static(prepare(config, source, recipe, source.seq_len), source.entry.static_len)
    path = out / "model.int8-static.onnx"
    built = build(source, path, recipe, config, text.calibration)
    check = check_quantized(path, source.path, built.kept_float, text.evaluation[0].feeds)
    accuracy = measure(Session(source.path), Session(path), text.evaluation, source.head)
    return path, built, check, accuracy, onnx.load(str(path))


def test_static_int8_takes_nnapi_whole(static_int8):
    path, built, _, _, proto = static_int8
    assert not {n.op_type for n in proto.graph.node} & set(CPU_ONLY)
    assert built.notes[0] == STATIC_VARIANTS[("onnx", "int8-static")].notes
    nnapi = mobile_partitions(path).provider("NNAPI")
    # acceptance: at most 2 partitions covering 95 %; today: one covering every node
    assert nnapi.partitions <= 2 and nnapi.coverage >= 0.95
    assert (nnapi.partitions, nnapi.covered, nnapi.unsupported) == (1, nnapi.nodes, ())


def test_static_int8_stores_each_weight_once_and_keeps_its_accuracy(static_int8):
    _, _, check, accuracy, proto = static_int8
    assert check.ok, check.problems
    assert check.copies and all(len(c.stored_as) == 1 for c in check.copies)
    # the tied decoder reads the one int8 word table, dequantized
    assert sum(n.op_type == "DequantizeLinear" and n.input[0].endswith("word_embeddings.weight_int8")
               for n in proto.graph.node) == 1
    logits = accuracy.outputs[0]
    assert logits.name == "prediction_logits" and logits.agreement_of == "MLM top-1"
    print("static int8-static", logits.row())
    assert logits.cosine_mean >= 0.98 and logits.agreement >= 0.8  # the bar of the dynamic file's int8-static


def test_int8_dynamic_is_cpu_only(workdir):
    """Reported beside it: the dynamic file's int8-dynamic form runs its activations' quantization
    and attention in operators NNAPI does not list, even with its shapes fixed."""
    result = quantize(workdir / "model.onnx", QuantizeConfig("int8-dynamic", calibration=(str(CORPUS),),
                                                             num_samples=8, eval_samples=8))
    report = mobile_partitions(result.out_path)
    fixed = next(p for p in report.if_fixed if p.provider == "NNAPI")
    assert report.provider("NNAPI").coverage < 0.5 and fixed.partitions > 2
    assert {"ai.onnx:DynamicQuantizeLinear", "ai.onnx:MatMulInteger"} <= {u.op for u in fixed.unsupported}
