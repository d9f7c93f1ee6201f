"""Static-shape ONNX for a phone's NPU: the graph of ``convert --to onnx --static``, written so
that ONNX Runtime's NNAPI and Core ML execution providers take it whole.

The exporter traces at ``[1, N]`` with no dynamic axes; :func:`make_static` then rewrites what
those providers refuse or what splits their partitions, each step a small pass over the graph:

- ids as int32 inputs (NNAPI has no 64-bit integers; its Gather takes int32 indices as they come);
- Constant nodes as initializers, and every Shape of a tensor whose shape is now known, with the
  small shape arithmetic behind it (Concat, Gather, Unsqueeze ... of shape vectors), folded;
- the position lookup ``Gather(table, [0..N-1])`` as ``Slice(table, 0, N)``: the whole table stays
  stored once, and a runtime that folds it keeps only the rows it reads;
- a lookup of one position (``hidden[:, 0]`` before the pooler) as Slice + Squeeze;
- LayerNormalization as ReduceMean / Sub / Mul / Add / Sqrt / Div, and GELU's tanh form as
  element-wise Mul / Add / Tanh: neither provider lists LayerNormalization and NNAPI no Gelu.

Core ML's list has no Gather at all: the word and token-type lookups at the graph's start stay
outside its one partition (what :mod:`albert_edge.formats.mobile_partitions` reports).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from albert_edge.formats.graph import INPUT_NAMES
from albert_edge.rewrite.initializers import DROP_UNUSED_INITIALIZERS
from albert_edge.rewrite.passes import Pass, in_place, run_passes

__all__ = ["make_static", "static_passes", "STATIC_OPSET"]

log = logging.getLogger(__name__)

# The opset a static file is written in unless asked: 17 has LayerNormalization (decomposed here)
# and spells GELU out in element-wise nodes; ReduceMean still takes its axes as an attribute.
STATIC_OPSET = 17
# A folded constant stays a shape vector, never a weight: nodes are folded only when every input
# is an initializer of at most this many elements.
_FOLD_MAX_ELEMENTS = 64


def make_static(proto: onnx.ModelProto) -> list[str]:
    """Rewrite the fixed-shape export ``proto`` in place (see the module docstring); returns what
    was rewritten, one phrase per pass that changed something."""
    done: list[str] = []
    run_passes(proto, static_passes(done))
    log.info("static graph: %s", "; ".join(done) or "nothing to rewrite")
    return done


def static_passes(done: list[str]) -> list[Pass[onnx.ModelProto]]:
    """The passes of :func:`make_static`, in order; each that changes something adds a phrase
    saying what, with how many nodes, to ``done``."""
    def counted(what: str, step) -> Pass[onnx.ModelProto]:
        return in_place(what, step, lambda count: done.append(f"{what} ({count})") if count else None)

    return [
        counted("ids as int32", lambda proto: _ids_as_int32(proto.graph)),
        counted("Constant nodes as initializers", lambda proto: _constants_as_initializers(proto.graph)),
        counted("shape arithmetic folded", _fold_shapes),
        counted("positions as a slice of the table", lambda proto: _positions_as_slice(proto.graph)),
        counted("one-position lookups as Slice + Squeeze", lambda proto: _single_lookups_as_slices(proto.graph)),
        counted("LayerNormalization decomposed", lambda proto: _decompose_layer_norm(proto.graph, _opset(proto))),
        counted("Gelu decomposed", lambda proto: _decompose_gelu(proto.graph)),
        DROP_UNUSED_INITIALIZERS,
    ]


def _opset(proto: onnx.ModelProto) -> int:
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


# -- the passes: each rewrites the graph in place and returns how many nodes it changed ----------

def _ids_as_int32(graph) -> int:
    """The int64 inputs become int32; a reader other than a Gather's indices or a Cast reads them
    through a Cast back to int64."""
    changed = 0
    for value in graph.input:
        if value.name in INPUT_NAMES and value.type.tensor_type.elem_type == TensorProto.INT64:
            value.type.tensor_type.elem_type = TensorProto.INT32
            changed += 1
            wide = f"{value.name}__int64"
            readers = [i for i, n in enumerate(graph.node) if value.name in n.input]
            wider = [i for i in readers if not _takes_int32(graph.node[i], value.name)]
            for i in wider:
                _rename_input(graph.node[i], value.name, wide)
            if wider:
                cast = helper.make_node("Cast", [value.name], [wide], to=TensorProto.INT64, name=wide)
                _splice(graph, {readers[0]: [cast, graph.node[readers[0]]]})
    return changed


def _takes_int32(node, name: str) -> bool:
    return node.op_type == "Cast" or (node.op_type == "Gather" and node.input[1] == name and node.input[0] != name)


def _constants_as_initializers(graph) -> int:
    constants = [i for i, n in enumerate(graph.node) if n.op_type == "Constant" and len(n.attribute) == 1
                 and n.attribute[0].name == "value"]
    for i in constants:
        tensor = onnx.TensorProto()
        tensor.CopyFrom(graph.node[i].attribute[0].t)
        tensor.name = graph.node[i].output[0]
        graph.initializer.append(tensor)
    _splice(graph, {i: [] for i in constants})
    return len(constants)


def _fold_shapes(proto: onnx.ModelProto) -> int:
    """Shape of a tensor of known shape -> its value; then every node whose inputs are all small
    initializers (shape vectors, never a weight) -> its result, until nothing changes."""
    graph = proto.graph
    inferred = onnx.shape_inference.infer_shapes(proto)
    shapes = {v.name: v.type.tensor_type.shape for v in (*inferred.graph.value_info, *inferred.graph.input)}
    known = {}
    for i, node in enumerate(graph.node):
        shape = shapes.get(node.input[0]) if node.op_type == "Shape" else None
        if shape is not None and all(d.HasField("dim_value") for d in shape.dim):
            dims = [int(d.dim_value) for d in shape.dim]
            start, end = _attr(node, "start", 0), _attr(node, "end", len(dims))
            _add_initializer(graph, node.output[0], np.asarray(dims[start:end], dtype=np.int64))
            known[i] = []
    _splice(graph, known)
    folded = len(known)
    while True:
        small = {t.name: t for t in graph.initializer if int(np.prod(t.dims)) <= _FOLD_MAX_ELEMENTS}
        ready = [i for i, n in enumerate(graph.node) if n.input and n.domain in ("", "ai.onnx")
                 and n.op_type != "Constant" and all(name in small for name in n.input if name)]
        if not ready:
            return folded
        for i in ready:
            node = graph.node[i]
            for name, value in zip(node.output, _evaluate(node, small, proto.opset_import)):
                _add_initializer(graph, name, value)
        _splice(graph, {i: [] for i in ready})
        folded += len(ready)


def _evaluate(node, initializers: Mapping[str, onnx.TensorProto], opsets) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    feeds = {name: numpy_helper.to_array(initializers[name]) for name in dict.fromkeys(node.input) if name}
    inputs = [helper.make_tensor_value_info(name, initializers[name].data_type, None) for name in feeds]
    outputs = [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None) for name in node.output]
    model = helper.make_model(helper.make_graph([node], "fold", inputs, outputs), opset_imports=list(opsets))
    return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]


def _positions_as_slice(graph) -> int:
    """Gather(table, [[0, 1, ..., N-1]]) -> Reshape(Slice(table, 0, N), [1, N, E])."""
    initializers = {t.name: t for t in graph.initializer}
    changes = {}
    for k, node in enumerate(graph.node):
        if node.op_type != "Gather":
            continue
        table, ids = (initializers.get(name) for name in node.input)
        if table is None or ids is None or _attr(node, "axis", 0) != 0 or node.input[1] == node.input[0]:
            continue
        positions = numpy_helper.to_array(ids)
        if positions.size < 2 or not np.array_equal(positions.reshape(-1), np.arange(positions.size)):
            continue
        base = node.name or node.output[0]
        n = positions.size
        _add_initializer(graph, f"{base}__zero", np.asarray([0], dtype=np.int64))
        _add_initializer(graph, f"{base}__end", np.asarray([n], dtype=np.int64))
        _add_initializer(graph, f"{base}__shape", np.asarray([*positions.shape, *table.dims[1:]], dtype=np.int64))
        changes[k] = [
            helper.make_node("Slice", [node.input[0], f"{base}__zero", f"{base}__end", f"{base}__zero"],
                             [f"{base}__rows"], name=f"{base}__slice"),
            helper.make_node("Reshape", [f"{base}__rows", f"{base}__shape"], [node.output[0]], name=f"{base}__reshape"),
        ]
    _splice(graph, changes)
    return len(changes)


def _single_lookups_as_slices(graph) -> int:
    """Gather(x, i, axis) with a constant scalar i -> Squeeze(Slice(x, i, i + 1, axis), axis)."""
    initializers = {t.name: t for t in graph.initializer}
    changes = {}
    for k, node in enumerate(graph.node):
        index = initializers.get(node.input[1]) if node.op_type == "Gather" else None
        if index is None or len(index.dims) != 0 or node.input[0] in initializers:
            continue
        i, axis, base = int(numpy_helper.to_array(index)), _attr(node, "axis", 0), node.name or node.output[0]
        if i < 0:
            continue
        for suffix, value in (("start", i), ("end", i + 1), ("axis", axis)):
            _add_initializer(graph, f"{base}__{suffix}", np.asarray([value], dtype=np.int64))
        changes[k] = [
            helper.make_node("Slice", [node.input[0], f"{base}__start", f"{base}__end", f"{base}__axis"],
                             [f"{base}__slice"], name=f"{base}__slice"),
            helper.make_node("Squeeze", [f"{base}__slice", f"{base}__axis"], [node.output[0]], name=f"{base}__squeeze"),
        ]
    _splice(graph, changes)
    return len(changes)


def _decompose_layer_norm(graph, opset: int) -> int:
    """LayerNormalization(x, scale, bias) over the last axis -> (x - mean) / sqrt(var + eps) * scale + bias."""
    changes = {}
    for k, node in enumerate(graph.node):
        if node.op_type != "LayerNormalization":
            continue
        if _attr(node, "axis", -1) != -1 or len(node.output) > 1 and any(node.output[1:]):
            raise ValueError(f"{node.name}: only a LayerNormalization over the last axis, with one output, is decomposed")
        x, scale, bias = (list(node.input) + [""])[:3]
        base, out = node.name or node.output[0], node.output[0]
        eps = _attr(node, "epsilon", 1e-5)
        _add_initializer(graph, f"{base}__eps", np.asarray(eps, dtype=np.float32))

        def mean(src: str, dst: str) -> onnx.NodeProto:
            if opset >= 18:
                _add_initializer(graph, "__last_axis", np.asarray([-1], dtype=np.int64))
                return helper.make_node("ReduceMean", [src, "__last_axis"], [dst], keepdims=1, name=dst)
            return helper.make_node("ReduceMean", [src], [dst], axes=[-1], keepdims=1, name=dst)

        new = [
            mean(x, f"{base}__mean"),
            helper.make_node("Sub", [x, f"{base}__mean"], [f"{base}__centred"], name=f"{base}__centred"),
            helper.make_node("Mul", [f"{base}__centred", f"{base}__centred"], [f"{base}__square"],
                             name=f"{base}__square"),
            mean(f"{base}__square", f"{base}__variance"),
            helper.make_node("Add", [f"{base}__variance", f"{base}__eps"], [f"{base}__variance_eps"],
                             name=f"{base}__variance_eps"),
            helper.make_node("Sqrt", [f"{base}__variance_eps"], [f"{base}__std"], name=f"{base}__std"),
            helper.make_node("Div", [f"{base}__centred", f"{base}__std"], [f"{base}__normed"], name=f"{base}__normed"),
            helper.make_node("Mul", [f"{base}__normed", scale], [f"{base}__scaled" if bias else out],
                             name=f"{base}__scaled"),
        ]
        if bias:
            new.append(helper.make_node("Add", [f"{base}__scaled", bias], [out], name=f"{base}__shifted"))
        changes[k] = new
    _splice(graph, changes)
    return len(changes)


def _decompose_gelu(graph) -> int:
    """Gelu(x, approximate="tanh") -> 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). The exact
    (erf) form is left as it is: NNAPI has no Erf, and the tanh form is not the same function."""
    nodes = {k: n for k, n in enumerate(graph.node) if n.op_type == "Gelu" and _attr(n, "approximate", "none") == "tanh"}
    for name, value in (("__gelu_cubic", 0.044715), ("__gelu_scale", np.sqrt(2.0 / np.pi)), ("__gelu_one", 1.0),
                        ("__gelu_half", 0.5)):
        if nodes:
            _add_initializer(graph, name, np.asarray(value, dtype=np.float32))
    changes = {}
    for k, node in nodes.items():
        x, base = node.input[0], node.name or node.output[0]
        steps = [("Mul", [x, x], "square"), ("Mul", [f"{base}__square", x], "cube"),
                 ("Mul", [f"{base}__cube", "__gelu_cubic"], "cubic"), ("Add", [x, f"{base}__cubic"], "inner"),
                 ("Mul", [f"{base}__inner", "__gelu_scale"], "scaled"), ("Tanh", [f"{base}__scaled"], "tanh"),
                 ("Add", [f"{base}__tanh", "__gelu_one"], "one_plus"), ("Mul", [x, f"{base}__one_plus"], "times_x")]
        new = [helper.make_node(op, inputs, [f"{base}__{out}"], name=f"{base}__{out}") for op, inputs, out in steps]
        new.append(helper.make_node("Mul", [f"{base}__times_x", "__gelu_half"], [node.output[0]], name=f"{base}__half"))
        changes[k] = new
    _splice(graph, changes)
    return len(changes)


# -- small graph helpers -------------------------------------------------------------------------

def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _add_initializer(graph, name: str, value: np.ndarray) -> None:
    if name not in {t.name for t in graph.initializer}:
        graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))


def _rename_input(node, old: str, new: str) -> None:
    for i, name in enumerate(node.input):
        if name == old:
            node.input[i] = new


def _splice(graph, changes: dict[int, list]) -> None:
    """Replace the node at each index of ``changes`` by its list of nodes (none: removed), in one
    rebuild: a node taken from ``graph.node`` is a copy once the list is rebuilt."""
    if not changes:
        return
    nodes = []
    for i, node in enumerate(graph.node):
        nodes.extend(changes[i] if i in changes else [node])
    del graph.node[:]
    graph.node.extend(nodes)
