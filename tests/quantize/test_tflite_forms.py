"""int8-full as ai-edge-litert runs it: computed alike whether each shared weight is packed once
(LiteRT's CompiledModel, Session's default) or per node (the classic Interpreter), and its
attention products in float, where XNNPACK runs them."""

from __future__ import annotations

import numpy as np
import pytest

from albert_edge import runtime_memory
from albert_edge.quantize import QuantizeConfig, quantize
from albert_edge.quantize.tflite_model import load, op_inputs, op_outputs, pack
from albert_edge.runtime import Session

from .conftest import CORPUS, copy_dir, feeds

pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

TEXT = dict(calibration=(str(CORPUS),), num_samples=24, eval_samples=16)
needs_compiled = pytest.mark.skipif(not runtime_memory.available(), reason="LiteRT CompiledModel not available")


@pytest.fixture(scope="module")
def full(tmp_path_factory, converted):
    """The trained MLM's fp32 directory with model.int8-full.tflite quantized beside it."""
    work = copy_dir(converted, tmp_path_factory.mktemp("forms") / "model")
    result = quantize(work / "model.tflite", QuantizeConfig("int8-full", **TEXT), work / "model.int8-full.tflite")
    assert result.kept and result.check.ok, result.check.problems
    return work


def _fc_groups(model) -> list[list]:
    """The FULLY_CONNECTED ops that read one weight, for each weight read by several."""
    groups: dict[int, list] = {}
    for op in model.graph.operators:
        if model.op_name(op) == "FULLY_CONNECTED":
            groups.setdefault(model.graph.tensors[op_inputs(op)[1]].buffer, []).append(op)
    return [ops for ops in groups.values() if len(ops) > 1]


def _params(model, t: int) -> tuple:
    q = model.graph.tensors[t].quantization
    return tuple(q.scale), tuple(q.zeroPoint)


def _outputs(path, once: bool, batch) -> np.ndarray:
    return Session(path, weights_once=once).run(batch)["prediction_logits"]


def test_applications_of_a_shared_weight_read_and_write_one_range(full):
    """XNNPACK packs the requantization scale (input x weight / output scale) with the weights:
    the applications of one weight must agree on both ranges to be packed once."""
    model = load((full / "model.int8-full.tflite").read_bytes())
    groups = _fc_groups(model)
    assert len(groups) >= 12  # Q, K, V, dense, ffn, ffn_output of each of the G=2 groups
    for ops in groups:
        assert len({_params(model, op_inputs(op)[0]) for op in ops}) == 1
        assert len({_params(model, op_outputs(op)[0]) for op in ops}) == 1
        assert len({op_inputs(op)[2] for op in ops}) == 1  # one bias


@needs_compiled
def test_packed_once_computes_what_packed_per_node_does(full, tmp_path):
    """Session's default (CompiledModel, each shared weight packed once) against the classic
    Interpreter (packed per node) on the int8-full file: the same logits. A file whose second
    application of a weight writes another output range, as the converter calibrates it, is
    computed with the first one's scale when packed once: the two routes part."""
    from albert_edge.quantize.tflite_sharing import _same_params_component

    path = full / "model.int8-full.tflite"
    batch = feeds(2, seed=5)
    once, per_node = _outputs(path, True, batch), _outputs(path, False, batch)
    step = float(np.abs(per_node).max()) / 127
    np.testing.assert_allclose(once, per_node, atol=2 * step)

    model = load(path.read_bytes())
    for ops in _fc_groups(model):  # each second application's output range made twice as wide
        for t in _same_params_component(model, op_outputs(ops[1])[0]):
            q = model.graph.tensors[t].quantization
            q.scale = [s * 2 for s in q.scale]
    bad = tmp_path / "model.int8-full.tflite"
    bad.write_bytes(pack(model))
    once, per_node = _outputs(bad, True, batch), _outputs(bad, False, batch)
    print("max |difference| in quantization steps:", np.abs(once - per_node).max() / step)
    assert np.abs(once - per_node).max() > 10 * step


def test_attention_products_run_in_float(full, tmp_path):
    """The attention's score and context products (no weights) are float BATCH_MATMULs, which
    XNNPACK delegates; Form(attention_in_float=False) keeps the converter's int8 ones, which it
    does not. Both stay close to the fp32 parent."""
    from albert_edge.quantize import recipe_for
    from albert_edge.quantize.calibration import prepare
    from albert_edge.quantize.source import open_model_file
    from albert_edge.quantize.tflite import Form, build

    def products(path) -> list[str]:
        model = load(path.read_bytes())
        return sorted({model.dtype(model.graph.tensors[t]).name for op in model.graph.operators
                       if model.op_name(op) == "BATCH_MATMUL" for t in op_inputs(op)})

    assert products(full / "model.int8-full.tflite") == ["float32"]
    source = open_model_file(full / "model.tflite")
    config = QuantizeConfig("int8-full", **TEXT)
    recipe = recipe_for("tflite", "int8-full")
    text = prepare(config, source, recipe, source.seq_len)
    int8 = tmp_path / "int8-attention.tflite"
    build(source, int8, recipe, config, text.calibration, form=Form(attention_in_float=False))
    assert products(int8) == ["int8"]

    batch = feeds(2, seed=7)
    want = Session(full / "model.tflite").run(batch)["prediction_logits"].reshape(-1)
    for path in (full / "model.int8-full.tflite", int8):
        got = Session(path).run(batch)["prediction_logits"].reshape(-1)
        assert want @ got / np.linalg.norm(want) / np.linalg.norm(got) > 0.98, path.name
