"""int8-full as ai-edge-litert runs it: computed alike whether each shared weight is packed once
(LiteRT's CompiledModel, Session's default) or per node (the classic Interpreter), and its
attention products and GELUs in float, where XNNPACK runs them."""

from __future__ import annotations

import numpy as np
import pytest

from albert_edge.runtime import compiled as runtime_memory
from albert_edge.converters.quantized import quantize_file
from albert_edge.quantize import QuantizeConfig
from albert_edge.formats.tflite_model import load, op_inputs, op_outputs, pack
from albert_edge.runtime import Session

from .conftest import CORPUS, SEQ, copy_dir, feeds, small_config

torch = pytest.importorskip("torch")
pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

TEXT = dict(calibration=(str(CORPUS),), num_samples=24, eval_samples=16)
needs_compiled = pytest.mark.skipif(not runtime_memory.available(), reason="LiteRT CompiledModel not available")


@pytest.fixture(scope="module")
def full(tmp_path_factory, converted):
    """The trained MLM's fp32 directory with model.int8-full.tflite quantized beside it."""
    work = copy_dir(converted, tmp_path_factory.mktemp("forms") / "model")
    result = quantize_file(work / "model.tflite", QuantizeConfig("int8-full", **TEXT), work / "model.int8-full.tflite")
    assert result.kept and result.check.ok, result.check.problems
    return work


@pytest.fixture(scope="module")
def bias_free(tmp_path_factory, spiece_model):
    """A randomly initialised MLM (zero biases, which the converter leaves out) as int8-full."""
    from albert_edge import checkpoints
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model

    torch.manual_seed(0)
    work = tmp_path_factory.mktemp("bias-free")
    ckpt = checkpoints.save(build_model(small_config(), "mlm"), work / "checkpoint", spiece=spiece_model)
    convert(ckpt, work / "model", targets=("tflite",), seq_len=SEQ)
    out = work / "model" / "model.int8-full.tflite"
    result = quantize_file(work / "model" / "model.tflite", QuantizeConfig("int8-full", **TEXT), out)
    assert result.kept and result.check.ok, result.check.problems
    return out


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


def _one_range_per_weight(path) -> None:
    model = load(path.read_bytes())
    groups = _fc_groups(model)
    assert len(groups) >= 12  # Q, K, V, dense, ffn, ffn_output of each of the G=2 groups
    for ops in groups:
        assert len({_params(model, op_inputs(op)[0]) for op in ops}) == 1
        assert len({_params(model, op_outputs(op)[0]) for op in ops}) == 1
        assert len({tuple(op_inputs(op)[2:3]) for op in ops}) == 1  # one bias (or none)


def test_applications_of_a_shared_weight_read_and_write_one_range(full):
    """XNNPACK packs the requantization scale (input x weight / output scale) with the weights:
    the applications of one weight must agree on both ranges to be packed once."""
    _one_range_per_weight(full / "model.int8-full.tflite")


@needs_compiled
def test_weights_without_biases_share_their_ranges_too(bias_free):
    """A FULLY_CONNECTED without a bias has no bias copies to drop, but packed once it needs the
    one range all the same."""
    model = load(bias_free.read_bytes())
    assert not any(len(op_inputs(op)) > 2 and op_inputs(op)[2] >= 0 for op in model.graph.operators
                   if model.op_name(op) == "FULLY_CONNECTED" and model.constant(op_inputs(op)[1]).shape[0] != 400)
    _one_range_per_weight(bias_free)
    for seq in (SEQ, 20):  # built for SEQ; 20 resized
        batch = feeds(2, seq=seq, seed=seq)
        once, per_node = _outputs(bias_free, True, batch), _outputs(bias_free, False, batch)
        np.testing.assert_allclose(once, per_node, atol=2 * float(np.abs(per_node).max()) / 127)


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


def test_attention_products_and_gelu_run_in_float(full, tmp_path):
    """The attention's score and context products (no weights) are float BATCH_MATMULs and the
    GELUs float, which XNNPACK delegates; the converter's form (Form(False, False)) keeps int8
    ones, which it does not. Both stay close to the fp32 parent."""
    from albert_edge.quantize import recipe_for
    from albert_edge.quantize.calibration import prepare
    from albert_edge.quantize.source import open_model_file
    from albert_edge.converters.tflite_quantized import build
    from albert_edge.quantize.tflite import Form

    def inputs(path, op_name: str) -> list[str]:
        model = load(path.read_bytes())
        return sorted({model.dtype(model.graph.tensors[t]).name for op in model.graph.operators
                       if model.op_name(op) == op_name for t in op_inputs(op)})

    assert inputs(full / "model.int8-full.tflite", "BATCH_MATMUL") == ["float32"]
    assert inputs(full / "model.int8-full.tflite", "GELU") == ["float32"]
    source = open_model_file(full / "model.tflite")
    config = QuantizeConfig("int8-full", **TEXT)
    recipe = recipe_for("tflite", "int8-full")
    text = prepare(config, source, recipe, source.seq_len)
    int8 = tmp_path / "converter-form.tflite"
    build(source, int8, recipe, config, text.calibration, form=Form(attention_in_float=False, gelu_in_float=False))
    assert inputs(int8, "BATCH_MATMUL") == inputs(int8, "GELU") == ["int8"]

    batch = feeds(2, seed=7)
    want = Session(full / "model.tflite").run(batch)["prediction_logits"].reshape(-1)
    for path in (full / "model.int8-full.tflite", int8):
        got = Session(path).run(batch)["prediction_logits"].reshape(-1)
        assert want @ got / np.linalg.norm(want) / np.linalg.norm(got) > 0.98, path.name
