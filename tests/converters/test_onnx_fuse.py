"""Attention fusion: each self-attention of an export becomes one MultiHeadAttention node that
onnxruntime runs with the same results as the unfused graph and as PyTorch, padding included,
with every weight initializer left as it was; a chain that differs from the exporter's is left
alone."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper

from albert_edge.converters import onnx as onnx_export
from albert_edge.rewrite.onnx_fuse import MS_DOMAIN, fuse_attention

from .conftest import TINY, tiny_model

RNG = np.random.default_rng(0)


def _feeds(config, batch: int, T: int) -> dict[str, np.ndarray]:
    ids = RNG.integers(0, config.vocab_size, (batch, T))
    mask = np.ones((batch, T), np.int64)
    mask[0, max(1, T // 2):] = 0  # padding at the end of one row
    if batch > 2:
        mask[2] = 0  # a row with nothing to attend to
    types = RNG.integers(0, config.type_vocab_size, (batch, T))
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _run(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def _weights(model: onnx.ModelProto) -> dict[str, bytes]:
    return {t.name: numpy_helper.to_array(t).tobytes() for t in model.graph.initializer if np.prod(t.dims) > 1}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = tiny_model(TINY.replace(num_hidden_layers=5, num_hidden_groups=2, inner_group_num=2), head="pretraining")
    path = onnx_export.export(model, tmp_path_factory.mktemp("fuse") / "model.onnx", seq_len=16)
    return model, onnx.load(str(path))


def test_every_attention_becomes_one_node(exported):
    model, proto = exported
    fused, count = fuse_attention(proto, model.config.num_attention_heads)
    applications = model.config.num_hidden_layers * model.config.inner_group_num
    assert count == applications
    ops = Counter(n.op_type for n in fused.graph.node)
    assert ops["MultiHeadAttention"] == applications
    assert ops["Softmax"] == 0
    assert not [n.name for n in fused.graph.node if "/attention" in n.name and n.op_type in ("Transpose", "Reshape")]
    # the mask is cast once, for all layers; the float mask bias and its nodes are gone
    (cast,) = [n for n in fused.graph.node if "attention_mask" in n.input]
    assert cast.op_type == "Cast" and cast.attribute[0].i == onnx.TensorProto.INT32
    attentions = [n for n in fused.graph.node if n.op_type == "MultiHeadAttention"]
    assert all(n.domain == MS_DOMAIN and n.input[4] == cast.output[0] for n in attentions)
    assert len(fused.graph.node) < len(proto.graph.node) / 2
    assert any(o.domain == MS_DOMAIN for o in fused.opset_import)
    onnx.checker.check_model(fused)
    assert Counter(n.op_type for n in proto.graph.node)["Softmax"] == applications  # a new model


def test_the_weights_are_untouched(exported):
    model, proto = exported
    fused, _ = fuse_attention(proto, model.config.num_attention_heads)
    assert _weights(fused) == _weights(proto)  # same initializers, same bytes: each weight still once


@pytest.mark.parametrize("batch,T", [(1, 1), (3, 7), (2, 16), (3, TINY.max_position_embeddings)])
def test_same_outputs_as_unfused_and_pytorch(exported, batch, T):
    model, proto = exported
    fused, _ = fuse_attention(proto, model.config.num_attention_heads)
    feeds = _feeds(model.config, batch, T)
    want, got = _run(proto, feeds), _run(fused, feeds)
    with torch.no_grad():
        torch_out = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
    torch_out = torch_out if isinstance(torch_out, (tuple, list)) else (torch_out,)
    for a, b, t in zip(want, got, torch_out):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(b, t.numpy(), rtol=1e-4, atol=1e-4)


def test_inplace_rewrites_the_given_model(exported):
    model, proto = exported
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    fused, count = fuse_attention(copy, model.config.num_attention_heads, inplace=True)
    assert fused is copy and count and any(n.op_type == "MultiHeadAttention" for n in copy.graph.node)


def _mask_bias_producer(proto: onnx.ModelProto) -> onnx.NodeProto:
    softmax_add = next(n for n in proto.graph.node if n.op_type == "Softmax")
    add = next(n for n in proto.graph.node if softmax_add.input[0] in n.output)
    producers = {o: n for n in proto.graph.node for o in n.output}
    return next(producers[i] for i in add.input if producers[i].op_type == "Mul")


def test_a_mask_of_another_form_is_left_alone(exported):
    """A mask bias that is not (1 - attention_mask) * fill: MultiHeadAttention's padding mask
    would compute something else, so nothing is fused."""
    model, proto = exported
    changed = onnx.ModelProto()
    changed.CopyFrom(proto)
    mul = _mask_bias_producer(changed)
    mul.op_type = "Add"  # (1 - mask) + fill
    fused, count = fuse_attention(changed, model.config.num_attention_heads)
    assert count == 0 and fused == changed


def test_a_score_read_elsewhere_keeps_its_attention(exported):
    """A scores tensor with a second reader (a debug output, say) keeps that attention as it
    is; the others are fused."""
    model, proto = exported
    changed = onnx.ModelProto()
    changed.CopyFrom(proto)
    softmax = next(n for n in changed.graph.node if n.op_type == "Softmax")
    changed.graph.output.append(onnx.helper.make_tensor_value_info(softmax.output[0], onnx.TensorProto.FLOAT, None))
    fused, count = fuse_attention(changed, model.config.num_attention_heads)
    applications = model.config.num_hidden_layers * model.config.inner_group_num
    assert count == applications - 1
    assert Counter(n.op_type for n in fused.graph.node)["Softmax"] == 1
    feeds = _feeds(model.config, 2, 9)
    for a, b in zip(_run(changed, feeds), _run(fused, feeds)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
