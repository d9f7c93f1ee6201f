"""ONNX export: every head and config variant agrees with PyTorch in onnxruntime and stores each
weight once; the deduplication step on its own, on graphs built to hold each kind of copy."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from albert_edge.converters import onnx as onnx_export
from albert_edge.converters.export import convert
from albert_edge.converters.verify import verify
from albert_edge.formats.weights import inspect_file
from albert_edge.errors import ConversionError
from albert_edge.model import HEADS

from .conftest import TINY, tiny_model

RNG = np.random.default_rng(0)


def assert_exported_well(model, path, seq_len: int = 16):
    report = verify(model, path, seq_len=seq_len)
    assert report.ok, report.problems()
    assert report.weights.duplicates == []
    assert report.weights.stored_bytes <= report.weights.bound_bytes
    # Every parameter of the model is in the file once: not fewer (nothing lost), not more.
    assert report.weights.model_param_bytes <= report.weights.stored_bytes
    return report


@pytest.mark.parametrize("head", list(HEADS))
def test_every_head(tmp_path, head):
    model = tiny_model(head=head)
    path = onnx_export.export(model, tmp_path / "model.onnx", seq_len=16)
    report = assert_exported_well(model, path)
    contents = report.contents
    assert contents.metadata["opset"] >= 17
    assert [s.name for s in contents.inputs] == ["input_ids", "attention_mask", "token_type_ids"]
    assert all(s.dtype == "int64" and s.shape == ("batch", "sequence") for s in contents.inputs)
    assert [s.name for s in contents.outputs] == list(model.output_names)
    assert all(s.shape[0] == "batch" for s in contents.outputs)
    assert contents.ops["Identity"] == 0  # weights are read directly, not through Identity
    assert report.seq_lens == [1, 5, 16, TINY.max_position_embeddings]


@pytest.mark.parametrize(
    "changes",
    [
        dict(num_hidden_groups=1),  # ALBERT's own G = 1
        dict(num_hidden_groups=4),  # G = L, BERT-like
        dict(inner_group_num=2),
        dict(embedding_size=16),  # E = H
        dict(embedding_size=24),  # E > H
        dict(sharing="attention"),
        dict(sharing="ffn"),
        dict(sharing="none"),
        dict(num_hidden_layers=5, num_hidden_groups=2, inner_group_num=2, hidden_act="relu"),
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_config_variants(tmp_path, changes):
    model = tiny_model(TINY.replace(**changes), head="pretraining")
    assert_exported_well(model, onnx_export.export(model, tmp_path / "model.onnx", seq_len=16))


def test_the_exporter_alone_stores_the_tied_decoder_twice(tmp_path):
    """Why the deduplication step exists: torch's exporter writes the word embeddings and the
    MLM decoder's transposed copy of them."""
    model = tiny_model(head="mlm")
    onnx_export._trace(model, tmp_path / "raw.onnx", seq_len=16, opset=17)
    _, raw = inspect_file(tmp_path / "raw.onnx", model)
    assert [(d.original, d.kind) for d in raw.duplicates] == [("albert.embeddings.word_embeddings.weight", "transposed")]
    _, fixed = inspect_file(onnx_export.export(model, tmp_path / "model.onnx", seq_len=16), model)
    assert fixed.duplicates == [] and fixed.stored_bytes < raw.stored_bytes


def test_each_linear_weight_is_stored_once_transposed_under_its_name(tmp_path):
    model = tiny_model(head="base")
    path = onnx_export.export(model, tmp_path / "model.onnx", seq_len=8)
    names = {t.name for t in onnx.load(str(path)).graph.initializer}
    linears = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert {f"{n}.weight_t" for n in linears} <= names
    assert not any(n.startswith("onnx::") and "MatMul" in n for n in names)


def test_export_leaves_the_model_as_it_was(tmp_path):
    model = tiny_model(head="mlm")
    names = [n for n, _ in model.named_parameters()]
    ids = torch.randint(0, TINY.vocab_size, (1, 6))
    with torch.no_grad():
        before = model(ids)
    onnx_export.export(model, tmp_path / "m.onnx", seq_len=8)
    with pytest.raises(ConversionError, match="torch.onnx.export failed"):  # restored after a failure too
        onnx_export.export(model, tmp_path / "m2.onnx", seq_len=8, opset=99)
    assert [n for n, _ in model.named_parameters()] == names
    assert not any("forward" in vars(m) for m in model.modules())
    with torch.no_grad():
        torch.testing.assert_close(model(ids), before, rtol=0, atol=0)


def test_loads_with_every_graph_optimization(tmp_path):
    path = onnx_export.export(tiny_model(head="qa"), tmp_path / "model.onnx", seq_len=16)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    assert (tmp_path / "optimized.onnx").stat().st_size > 0


def test_external_data_past_the_threshold(tmp_path):
    model = tiny_model(head="mlm")
    path = onnx_export.export(model, tmp_path / "model.onnx", seq_len=16, external_data_threshold=4096)
    assert (tmp_path / "model.onnx.data").is_file()
    stored = onnx.load(str(path), load_external_data=False).graph.initializer
    big = [t for t in stored if np.prod(t.dims) * 4 >= 1024]
    assert big and all(t.data_location == TensorProto.EXTERNAL for t in big)
    report = assert_exported_well(model, path)
    assert report.contents.metadata["external_data"] == ["model.onnx.data"]
    # Under the threshold, one self-contained file.
    (tmp_path / "inline").mkdir()
    inline = onnx_export.export(model, tmp_path / "inline" / "model.onnx", seq_len=16)
    assert [p.name for p in inline.parent.iterdir()] == ["model.onnx"]
    assert inspect_file(inline)[0].metadata["external_data"] == []


def test_convert_moves_external_data_and_lists_it(tmp_path):
    model = tiny_model(head="base")
    result = convert(model, tmp_path / "out", seq_len=8, external_data_threshold=4096)
    entry = result.files[0].entry
    assert [d["name"] for d in entry.data_files] == ["model.onnx.data"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["manifest.json", "model.onnx", "model.onnx.data"]
    assert verify(model, tmp_path / "out" / "model.onnx", seq_len=8).ok


def test_opset_below_17_is_refused(tmp_path):
    with pytest.raises(ConversionError, match="opset 13 is too old"):
        onnx_export.export(tiny_model(), tmp_path / "model.onnx", opset=13)


def test_newer_opset(tmp_path):
    path = onnx_export.export(tiny_model(), tmp_path / "model.onnx", seq_len=8, opset=18)
    assert onnx.load(str(path)).opset_import[0].version == 18


@pytest.mark.parametrize("act", ["gelu_new", "gelu"])
def test_gelu_is_one_node_from_opset_20(tmp_path, act):
    """Opset 20 keeps GELU (tanh form or exact) as one Gelu node per layer application; the
    opset-17 file spells it out, and both agree with PyTorch."""
    model = tiny_model(TINY.replace(hidden_act=act))
    ops = {}
    for opset in (17, onnx_export.DEFAULT_OPSET):
        path = onnx_export.export(model, tmp_path / f"model{opset}.onnx", seq_len=8, opset=opset)
        assert_exported_well(model, path, seq_len=8)
        graph = onnx.load(str(path)).graph
        ops[opset] = [n for n in graph.node if n.op_type == "Gelu"]
    assert onnx_export.DEFAULT_OPSET == 20
    assert ops[17] == [] and len(ops[20]) == TINY.num_hidden_layers
    want = "tanh" if act == "gelu_new" else "none"
    assert {helper.get_attribute_value(a) for n in ops[20] for a in n.attribute} <= {want.encode()}


# -- the deduplication step ------------------------------------------------------------------------

def _model(nodes, inits, outputs=(("y", ["b", "t", 4]),)):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def _check_same_outputs_and_once(model):
    onnx.checker.check_model(model)
    deduped = onnx_export.deduplicate_weights(model)
    onnx.checker.check_model(deduped)
    x = RNG.standard_normal((2, 4, 4)).astype(np.float32)
    for before, after in zip(_run(model, x), _run(deduped, x)):
        np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-6)
    from albert_edge.formats.graph import StoredTensor
    from albert_edge.formats.weights import find_duplicates

    stored = [StoredTensor(t.name, numpy_helper.to_array(t)) for t in deduped.graph.initializer]
    assert find_duplicates(stored) == []
    return deduped


def test_dedup_exact_copies_read_the_parameter():
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "onnx::MatMul_1"], ["h"]),
                    helper.make_node("MatMul", ["h", "layer.weight"], ["y"])],
                   {"onnx::MatMul_1": w.copy(), "layer.weight": w})
    deduped = _check_same_outputs_and_once(model)
    assert [t.name for t in deduped.graph.initializer] == ["layer.weight"]
    assert [list(n.input) for n in deduped.graph.node] == [["x", "layer.weight"], ["h", "layer.weight"]]


def test_dedup_transposed_copy_under_matmul_becomes_gemm():
    emb = RNG.standard_normal((6, 4)).astype(np.float32)  # (V, E), read by Gather elsewhere
    model = _model([helper.make_node("MatMul", ["x", "onnx::MatMul_9"], ["y"]),
                    helper.make_node("Gather", ["word_embeddings", "idx"], ["e"])],
                   {"onnx::MatMul_9": np.ascontiguousarray(emb.T), "word_embeddings": emb,
                    "idx": np.array([0, 5], dtype=np.int64)},
                   outputs=(("y", ["b", "t", 6]), ("e", [2, 4])))
    deduped = _check_same_outputs_and_once(model)
    ops = [n.op_type for n in deduped.graph.node]
    assert "MatMul" not in ops and ops.count("Gemm") == 1
    gemm = next(n for n in deduped.graph.node if n.op_type == "Gemm")
    assert gemm.input[1] == "word_embeddings" and helper.get_attribute_value(gemm.attribute[0]) == 1


def test_dedup_transposed_copy_elsewhere_becomes_transpose_node():
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                    helper.make_node("Add", ["h", "onnx::Add_3"], ["y"])],
                   {"w": w, "onnx::Add_3": np.ascontiguousarray(w.T)})
    deduped = _check_same_outputs_and_once(model)
    transpose = deduped.graph.node[0]
    assert transpose.op_type == "Transpose" and list(transpose.input) == ["w"]


def test_dedup_reshaped_copy_becomes_reshape_node():
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                    helper.make_node("Add", ["h", "onnx::Add_4"], ["y"])],
                   {"w": w, "onnx::Add_4": w.reshape(1, 4, 4)})
    deduped = _check_same_outputs_and_once(model)
    assert deduped.graph.node[0].op_type == "Reshape"
    assert sorted(t.name for t in deduped.graph.initializer) == ["onnx::Add_4__shape", "w"]


def test_dedup_inlines_identity_of_an_initializer():
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    model = _model([helper.make_node("Identity", ["w"], ["w_layer2"]),
                    helper.make_node("MatMul", ["x", "w"], ["h"]),
                    helper.make_node("MatMul", ["h", "w_layer2"], ["y"])], {"w": w})
    deduped = _check_same_outputs_and_once(model)
    assert [n.op_type for n in deduped.graph.node] == ["MatMul", "MatMul"]
    assert deduped.graph.node[1].input[1] == "w"


def test_dedup_leaves_the_input_model_alone():
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "a"], ["h"]), helper.make_node("MatMul", ["h", "b"], ["y"])],
                   {"a": w, "b": w.copy()})
    onnx_export.deduplicate_weights(model)
    assert len(model.graph.initializer) == 2
