"""Graph rewrites as named passes: run_passes applies a list in its order and logs each by name,
and the ONNX exporter, its static form and the .ort conversion list theirs."""

from __future__ import annotations

import logging

import pytest

from albert_edge.rewrite.passes import Pass, in_place, run_passes

pytest.importorskip("onnx")


def test_passes_run_in_order_and_are_logged_by_name(caplog):
    seen = []
    passes = [Pass("double", lambda xs: [*xs, *xs]), in_place("note", lambda xs: len(xs), seen.append),
              Pass("first two", lambda xs: xs[:2])]
    with caplog.at_level(logging.DEBUG, logger="albert_edge.rewrite.passes"):
        assert run_passes([1, 2, 3], passes) == [1, 2]
    assert seen == [6]
    assert [r.getMessage() for r in caplog.records if r.name == "albert_edge.rewrite.passes"] == [
        "pass: double", "pass: note", "pass: first two"]
    assert run_passes([1], []) == [1]


def test_an_in_place_pass_returns_the_graph_it_changed():
    graph = [1]
    assert in_place("append", lambda g: g.append(2))(graph) is graph and graph == [1, 2]


def test_the_onnx_exporter_lists_its_passes():
    from albert_edge.converters import onnx as onnx_export
    from albert_edge.converters.onnx_static import static_passes

    assert [p.name for p in onnx_export.PASSES] == ["deduplicate weights"]
    assert [p.name for p in onnx_export.STATIC_PASSES] == ["deduplicate weights", "static graph for an NPU"]
    assert [p.name for p in static_passes([])] == [
        "ids as int32", "Constant nodes as initializers", "shape arithmetic folded",
        "positions as a slice of the table", "one-position lookups as Slice + Squeeze",
        "LayerNormalization decomposed", "Gelu decomposed", "drop unused initializers"]


def test_the_static_passes_note_what_they_changed(tmp_path):
    import onnx

    from albert_edge.converters.onnx import STATIC_OPSET, _trace, deduplicate_weights
    from albert_edge.converters.onnx_static import make_static, static_passes

    from .conftest import tiny_model

    _trace(tiny_model(head="base"), tmp_path / "traced.onnx", seq_len=8, opset=STATIC_OPSET, static=True)
    proto = deduplicate_weights(onnx.load(str(tmp_path / "traced.onnx")))
    done = make_static(proto)
    assert done[0] == "ids as int32 (3)"
    order = [p.name for p in static_passes([])]
    changed = [d.rsplit(" (", 1)[0] for d in done]
    assert changed == sorted(changed, key=order.index)  # each phrase a pass's, in the passes' order
    assert {"ids as int32", "positions as a slice of the table", "LayerNormalization decomposed"} <= set(changed)
    assert not any(n.op_type in ("LayerNormalization", "Gelu", "Shape") for n in proto.graph.node)
    assert make_static(proto) == []  # nothing left to rewrite


def test_to_ort_lists_its_passes():
    from albert_edge.converters.ort import keep_shared_passes

    changed = []
    assert [p.name for p in keep_shared_passes(changed)] == [
        "tables read transposed stored once, transposed", "shared weights kept from folding"]
