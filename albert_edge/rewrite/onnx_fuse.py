"""Fuse each self-attention of an exported ALBERT graph into one onnxruntime
``com.microsoft.MultiHeadAttention`` node, with no weight touched; and keep onnxruntime's slow
SkipLayerNormalization out of the graph an app's default session makes (:func:`residuals_as_sum`).

The exporter spells attention out per layer application: Reshape and Transpose of Q, K and V,
MatMul, Div by sqrt(head_dim), Add of the mask bias, Softmax, MatMul, Transpose, Reshape, and a
Shape/Gather/Unsqueeze/Concat chain for every Reshape: ~35 nodes per layer, which onnxruntime
runs one by one. MultiHeadAttention (onnxruntime's CPU kernel) takes the already projected Q, K
and V, so the products with the shared weights stay as they are, each weight read from its one
initializer, and the padding mask, cast to int32 once for all layers.

onnxruntime's own AttentionFusion is no substitute: it packs the Q, K and V weights into a new
tensor per layer application, which breaks weights-once. The rewrite is all or nothing per
attention: a chain that differs in any step from the exporter's is left as it is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from albert_edge.formats.graph import INPUT_NAMES
from .initializers import drop_unused_initializers
from .passes import Pass, in_place

__all__ = ["fuse_attention", "residuals_as_sum", "GraphIndex", "MS_DOMAIN", "attention_pass", "RESIDUALS_AS_SUM"]

log = logging.getLogger(__name__)

MS_DOMAIN = "com.microsoft"
_MASK_INPUT = INPUT_NAMES[1]  # attention_mask: (B, T) int64, 1 = attend
_BHTD, _BHDT = [0, 2, 1, 3], [0, 2, 3, 1]  # (B, T, heads, head_dim) -> per-head Q or V, K transposed


@dataclass(frozen=True)
class _Attention:
    """One matched self-attention: its inputs, the tensor it makes and the nodes it replaces."""

    query: str  # (B, T, H) outputs of the Q, K, V projections
    key: str
    value: str
    scale: float  # applied to Q.K^T before the mask bias is added
    mask_bias: str  # (B, 1, 1, T) float tensor added to the scores
    output: str  # (B, T, H) context that the output projection reads
    nodes: tuple[int, ...]  # ids of the replaced nodes; the last is where the fused node goes


@dataclass(frozen=True)
class _PaddingMask:
    """A mask bias computed as (1 - attention_mask[:, None, None, :]) * fill."""

    source: str
    fill: float


class GraphIndex:
    """Who makes and who reads each tensor of a graph, and its constants (for the matchers here
    and in albert_edge.quantize.onnx_graph)."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.producer = {out: node for node in graph.node for out in node.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
        self.initializers = {t.name: t for t in graph.initializer}
        self.outputs = {o.name for o in graph.output}

    def made_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None

    def only_reader(self, name: str) -> onnx.NodeProto | None:
        readers = self.readers.get(name, [])
        return readers[0] if len(readers) == 1 and name not in self.outputs else None

    def constant(self, name: str) -> np.ndarray | None:
        if name in self.initializers:
            return numpy_helper.to_array(self.initializers[name])
        node = self.made_by(name, "Constant")
        attr = next(iter(node.attribute), None) if node is not None else None
        if attr is None:
            return None
        return numpy_helper.to_array(attr.t) if attr.name == "value" else np.asarray(helper.get_attribute_value(attr))

    def scalar(self, name: str) -> float | None:
        value = self.constant(name)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


def fuse_attention(model: onnx.ModelProto, num_heads: int, inplace: bool = False) -> tuple[onnx.ModelProto, int]:
    """Replace every self-attention of ``model`` (an albert-edge export with ``num_heads``
    heads) by a MultiHeadAttention node. Returns the model (a new one unless ``inplace``) and
    how many attentions it fused. Initializers that weights live in, graph inputs and outputs
    are unchanged; the mask must be 0/1 (as the tokenizer makes it): a position is attended
    when its attention_mask is above 0."""
    if not inplace:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    g = GraphIndex(model.graph)
    found = [a for a in map(lambda n: _match(g, n), model.graph.node) if a is not None]
    masks = {name: _padding_mask(g, name) for name in {a.mask_bias for a in found}}
    found = [a for a in found if masks[a.mask_bias] is not None]
    if not found or len({masks[a.mask_bias] for a in found}) != 1:
        log.info("no self-attention fused (%d of the expected form)", len(found))
        return model, 0
    mask = masks[found[0].mask_bias]
    key_padding = f"{mask.source}__int32"
    nodes = [helper.make_node("Cast", [mask.source], [key_padding], to=TensorProto.INT32, name=f"{key_padding}__cast")]
    fused = {a.nodes[-1]: _make_attention(a, key_padding, num_heads, mask.fill) for a in found}
    replaced = {i for a in found for i in a.nodes}
    for node in model.graph.node:  # each fused node where its last replaced node was: still sorted
        if id(node) in fused:
            nodes.append(fused[id(node)])
        elif id(node) not in replaced:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    _drop_dead_nodes(model.graph)
    _declare_outputs(model, [a.output for a in found])
    if not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    log.info("fused %d self-attention(s) into MultiHeadAttention", len(found))
    return model, len(found)


def attention_pass(num_heads: int) -> Pass[onnx.ModelProto]:
    """:func:`fuse_attention` of a model with ``num_heads`` heads, as a pass (in place)."""
    return in_place("self-attention as MultiHeadAttention",
                    lambda model: fuse_attention(model, num_heads, inplace=True))


def residuals_as_sum(model: onnx.ModelProto) -> int:
    """Write each residual Add that a LayerNormalization reads (two computed tensors, no
    constant) as a two-input ``Sum``, in place; returns how many. The same sum, but onnxruntime's
    SkipLayerNormFusion, which an app's session with default options runs, matches Add only: its
    SkipLayerNormalization kernel is many times slower than LayerNormalization on x86 with
    AVX-512, a large share of an ALBERT-base int8 call. Left unfused, the int8 file runs faster
    than onnxruntime's quantize_dynamic file on default options (benchmarks/peers.py measures it)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    constants = {t.name for t in model.graph.initializer}
    changed = 0
    for node in model.graph.node:
        add = producers.get(node.input[0]) if node.op_type == "LayerNormalization" else None
        if add is not None and add.op_type == "Add" and len(add.input) == 2 and not set(add.input) & constants:
            add.op_type = "Sum"
            changed += 1
    log.info("%d residual Add(s) before LayerNormalization written as Sum", changed)
    return changed


RESIDUALS_AS_SUM: Pass[onnx.ModelProto] = in_place("residual Add before LayerNormalization as Sum", residuals_as_sum)


def _make_attention(a: _Attention, key_padding: str, num_heads: int, fill: float) -> onnx.NodeProto:
    return helper.make_node(
        "MultiHeadAttention", [a.query, a.key, a.value, "", key_padding], [a.output], domain=MS_DOMAIN,
        name=f"{a.output}__attention", num_heads=num_heads, scale=a.scale, mask_filter_value=fill,
    )


def _match(g: GraphIndex, softmax: onnx.NodeProto) -> _Attention | None:
    """The attention around ``softmax``, or None when any step differs from the exporter's:
    Softmax(Q.K^T / c + mask_bias) . V, heads merged back by Transpose + Reshape."""
    if softmax.op_type != "Softmax" or _attr(softmax, "axis", -1) not in (-1, 3):
        return None
    add = g.made_by(softmax.input[0], "Add")
    if add is None or g.only_reader(add.output[0]) is None:
        return None
    scaled, mask_bias = _scaled_scores(g, add)
    qk = g.made_by(scaled.input[0], "MatMul") if scaled is not None else None
    factor = g.scalar(scaled.input[1]) if scaled is not None else None
    if qk is None or not factor or g.only_reader(qk.output[0]) is None:
        return None
    pv = g.only_reader(softmax.output[0])
    if pv is None or pv.op_type != "MatMul" or pv.input[0] != softmax.output[0]:
        return None
    back = g.only_reader(pv.output[0])
    merge = g.only_reader(back.output[0]) if back is not None else None
    if back is None or back.op_type != "Transpose" or _attr(back, "perm", None) != _BHTD \
            or merge is None or merge.op_type != "Reshape":
        return None
    heads = [_heads(g, qk.input[0], _BHTD), _heads(g, qk.input[1], _BHDT), _heads(g, pv.input[1], _BHTD)]
    if any(h is None for h in heads):
        return None
    (query, q_nodes), (key, k_nodes), (value, v_nodes) = heads
    scale = 1.0 / factor if scaled.op_type == "Div" else factor
    chain = [*q_nodes, *k_nodes, *v_nodes, qk, scaled, add, softmax, pv, back, merge]
    return _Attention(query, key, value, scale, mask_bias, merge.output[0], tuple(map(id, chain)))


def _scaled_scores(g: GraphIndex, add: onnx.NodeProto) -> tuple[onnx.NodeProto | None, str]:
    """The Div or Mul by a constant that scales Q.K^T, read by ``add`` alone, and the other
    input of ``add`` (the mask bias)."""
    for scores, other in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
        node = g.producer.get(scores)
        if node is not None and node.op_type in ("Div", "Mul") and g.only_reader(scores) is not None:
            return node, other
    return None, ""


def _heads(g: GraphIndex, name: str, perm: list[int]) -> tuple[str, list[onnx.NodeProto]] | None:
    """The (B, T, H) tensor that Reshape to (B, T, heads, head_dim) then Transpose(perm) made
    into ``name``, with those two nodes; None unless each has no other reader."""
    transpose = g.made_by(name, "Transpose")
    if transpose is None or _attr(transpose, "perm", None) != perm or g.only_reader(name) is None:
        return None
    reshape = g.made_by(transpose.input[0], "Reshape")
    if reshape is None or g.only_reader(reshape.output[0]) is None:
        return None
    return reshape.input[0], [reshape, transpose]


def _padding_mask(g: GraphIndex, name: str) -> _PaddingMask | None:
    """``name`` as (1 - float(attention_mask)[:, None, None, :]) * fill, or None."""
    mul = g.made_by(name, "Mul")
    if mul is None:
        return None
    for sub_out, fill_in in ((mul.input[0], mul.input[1]), (mul.input[1], mul.input[0])):
        sub, fill = g.made_by(sub_out, "Sub"), g.scalar(fill_in)
        if sub is not None and fill is not None:
            break
    else:
        return None
    cast = g.made_by(sub.input[1], "Cast")
    if g.scalar(sub.input[0]) != 1.0 or cast is None or _attr(cast, "to", None) != TensorProto.FLOAT:
        return None
    tensor, applied = cast.input[0], []
    while (unsqueeze := g.made_by(tensor, "Unsqueeze")) is not None:
        axes = g.constant(unsqueeze.input[1]) if len(unsqueeze.input) > 1 else None
        if axes is None:
            return None
        applied.insert(0, [int(a) for a in axes.reshape(-1)])
        tensor = unsqueeze.input[0]
    dims: list[str | int] = ["B", "T"]
    for axes in applied:  # in the order the graph applies them
        rank = len(dims) + len(axes)
        for axis in sorted(a % rank for a in axes):
            dims.insert(axis, 1)
    if tensor != _MASK_INPUT or dims != ["B", 1, 1, "T"]:
        return None
    return _PaddingMask(tensor, fill)


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return list(value) if a.type == onnx.AttributeProto.INTS else value
    return default


def _drop_dead_nodes(graph: onnx.GraphProto) -> None:
    """Remove the nodes nothing reads any more (the shape chains of the replaced Reshapes), then
    the initializers nothing reads any more."""
    outputs = {o.name for o in graph.output}
    nodes = list(graph.node)
    while True:
        read = {name for node in nodes for name in node.input} | outputs
        alive = [n for n in nodes if any(out in read for out in n.output)]
        if len(alive) == len(nodes):
            break
        nodes = alive
    if len(nodes) != len(graph.node):
        del graph.node[:]
        graph.node.extend(nodes)
    drop_unused_initializers(graph)


def _declare_outputs(model: onnx.ModelProto, names: list[str]) -> None:
    """ONNX shape inference does not know com.microsoft ops: state the fused nodes' output type,
    (batch, sequence, hidden) float, so tensors downstream (and the quantizers reading their
    types) keep theirs."""
    ids = next(i for i in model.graph.input if i.name == INPUT_NAMES[0]).type.tensor_type.shape.dim
    batch, sequence = (d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in ids)
    model.graph.value_info.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, sequence, None])
                                  for name in names)
