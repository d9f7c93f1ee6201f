"""The weights-once analysis: every kind of copy is found, nothing else is, and the work is not
quadratic in the number of tensors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from albert_edge.config import AlbertConfig
from albert_edge.formats import weights as W
from albert_edge.formats.graph import GraphContents, StoredTensor
from albert_edge.errors import ConversionError
from albert_edge.model import build_model

RNG = np.random.default_rng(0)


def tensor(name: str, *shape: int, dtype=np.float32) -> StoredTensor:
    return StoredTensor(name, RNG.standard_normal(shape).astype(dtype))


def contents(*tensors: StoredTensor) -> GraphContents:
    return GraphContents(format="onnx", inputs=[], outputs=[], weights=list(tensors))


def test_distinct_tensors_have_no_duplicates():
    report = W.analyze(contents(tensor("a", 16, 16), tensor("b", 16, 16), tensor("c", 256)))
    assert report.duplicates == [] and report.ok
    assert report.stored_bytes == report.unique_bytes == 3 * 256 * 4
    assert report.num_tensors == 3 and report.num_constants == 0


@pytest.mark.parametrize(
    ("make_copy", "kind"),
    [
        (lambda a: a.copy(), "exact"),
        (lambda a: a.reshape(4, 4, 8), "reshaped"),
        (lambda a: a.reshape(-1), "reshaped"),
        (lambda a: np.ascontiguousarray(a.T), "transposed"),
        (lambda a: np.ascontiguousarray(a.reshape(4, 4, 8).transpose(2, 0, 1)), "transposed"),
        (lambda a: np.ascontiguousarray(a.T).reshape(8, 16), "transposed"),  # transposed, then reshaped
        (lambda a: a.reshape(-1)[np.random.default_rng(1).permutation(a.size)], "permuted"),
    ],
)
def test_each_kind_of_copy_is_found(make_copy, kind):
    original = tensor("emb", 16, 8)
    copy = StoredTensor("onnx::MatMul_7", np.ascontiguousarray(make_copy(original.data)))
    report = W.analyze(contents(original, tensor("other", 16, 8), copy))
    assert [(d.name, d.original, d.kind) for d in report.duplicates] == [("onnx::MatMul_7", "emb", kind)]
    assert report.unique_bytes == report.stored_bytes - original.nbytes
    assert not report.ok
    assert "onnx::MatMul_7 is a" in report.problems()[0]


def test_copy_in_another_dtype_is_not_a_duplicate():
    a = tensor("w", 8, 8)
    report = W.analyze(contents(a, StoredTensor("w16", a.data.astype(np.float16))))
    assert report.duplicates == []


def test_one_value_changed_is_not_a_copy():
    a = tensor("w", 8, 8)
    changed = a.data.T.copy()
    changed[0, 0] += 1e-3
    assert W.analyze(contents(a, StoredTensor("w2", changed))).duplicates == []


def test_uniform_and_small_tensors_are_not_weights_to_dedupe():
    # Two zero biases or two LayerNorm gammas of ones are distinct parameters with equal values;
    # two [0, 0, -1] shape vectors are graph constants.
    zeros = [StoredTensor(f"bias{i}", np.zeros(32, np.float32)) for i in range(3)]
    shapes = [StoredTensor(f"shape{i}", np.array([0, 0, -1], np.int64)) for i in range(3)]
    report = W.analyze(contents(*zeros, *shapes))
    assert report.duplicates == []
    assert report.num_tensors == 3 and report.num_constants == 3
    assert report.stored_bytes == 3 * 128 + 3 * 24


def test_three_copies_point_at_the_first():
    a = tensor("w", 12, 4)
    report = W.analyze(contents(a, StoredTensor("c1", a.data.T.copy()), StoredTensor("c2", a.data.copy())))
    assert [(d.name, d.original) for d in report.duplicates] == [("c1", "w"), ("c2", "w")]
    assert report.unique_bytes == a.nbytes


def test_distinct_same_size_tensors_are_never_compared(monkeypatch):
    # Bucketing by the fingerprint means 200 same-shape weights cost 200 fingerprints, not
    # 200 * 199 / 2 comparisons.
    calls = []
    real = W._copy_kind
    monkeypatch.setattr(W, "_copy_kind", lambda a, b: calls.append(1) or real(a, b))
    many = [tensor(f"w{i}", 16, 16) for i in range(200)]
    assert W.find_duplicates(many) == []
    assert calls == []


def test_fingerprint_ignores_order_but_not_values():
    a = RNG.standard_normal((6, 5)).astype(np.float32)
    assert W._fingerprint(a) == W._fingerprint(np.ascontiguousarray(a.T))
    b = a.copy()
    b[2, 3] = np.nextafter(b[2, 3], np.float32(10))  # one ulp
    assert W._fingerprint(a) != W._fingerprint(b)
    assert W._fingerprint(np.ones((4, 4), np.float32)) is None


def test_bound_against_the_model():
    model = build_model(AlbertConfig.preset("tiny"), "mlm")
    unique = W.model_param_bytes(model)
    # The decoder weight is the word-embedding table: counted once.
    assert unique == 4 * sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert W.model_param_bytes(model, itemsize=2) == unique // 2
    fits = W.analyze(contents(StoredTensor("all", np.zeros(unique // 4, np.float32))), model)
    assert fits.model_param_bytes == unique and fits.within_bound and fits.ok
    assert fits.bound_bytes == int(1.005 * unique) + 64 * 1024
    too_big = W.analyze(contents(StoredTensor("all", np.zeros(unique // 4 + 20_000, np.float32))), model)
    assert too_big.within_bound is False and not too_big.ok
    assert "exceed the bound" in too_big.problems()[0]
    assert too_big.to_dict()["within_bound"] is False


def _onnx_with_copies(path):
    """A real ONNX file that stores a weight twice (exact) and a third time transposed."""
    w = RNG.standard_normal((4, 6)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w.copy(), "w_again"),
             numpy_helper.from_array(np.ascontiguousarray(w.T), "w_t")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("MatMul", ["x", "w_again"], ["b"]),
             helper.make_node("MatMul", ["a", "w_t"], ["c"])]
    graph = helper.make_graph(
        nodes, "copies", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("b", "c")], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_inspect_file_reads_back_an_onnx_file(tmp_path):
    path = _onnx_with_copies(tmp_path / "copies.onnx")
    contents_, report = W.inspect_file(path)
    assert contents_.format == "onnx" and contents_.metadata["opset"] == 17
    assert contents_.ops["MatMul"] == 3
    assert [(d.name, d.original, d.kind) for d in report.duplicates] == [
        ("w_again", "w", "exact"), ("w_t", "w", "transposed")]
    assert report.stored_bytes == 3 * 96 and report.unique_bytes == 96


def test_read_file_errors(tmp_path):
    with pytest.raises(ConversionError, match="expected .onnx, .tflite"):
        W.read_file(tmp_path / "model.pt")
    with pytest.raises(ConversionError, match="no such file"):
        W.read_file(tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"\x08\x07junk that is not protobuf \xff\xff")
    with pytest.raises(ConversionError, match="junk.onnx"):
        W.read_file(tmp_path / "junk.onnx")


def test_model_param_bytes_counts_shared_layers_once():
    config = AlbertConfig.preset("tiny")
    shared = build_model(config, "base")
    unshared = build_model(config.replace(num_hidden_groups=config.num_hidden_layers), "base")
    per_group = sum(p.numel() for p in shared.encoder.albert_layer_groups[0].parameters()) * 4
    assert W.model_param_bytes(unshared) - W.model_param_bytes(shared) == 2 * per_group
    assert isinstance(next(shared.parameters()), torch.nn.Parameter)
