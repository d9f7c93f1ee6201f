"""ONNX graph rewrites the quantizers need, as small steps on a ModelProto.

- The word-embedding table is read by a Gather and, in MLM heads, by the tied decoder's
  Gemm(transB=1). onnxruntime's quantize_dynamic turns that Gemm into a MatMul by transposing
  the initializer in place (corrupting the Gather), and its static quantizer gives the shared
  table per-channel parameters the Gather cannot use. ``quantize_tied_table`` stores the table
  once as int8 with one scale per row and rewrites both readers to use it.
- ``to_float16`` stores every float weight in float16 and computes in float16, with int64
  inputs and float32 outputs as before.
- ``pack_attention_inputs`` makes the Q, K and V projections of an int8 file one product over
  a Concat of their three stored int8 weights, which onnxruntime folds once at load.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from albert_edge.rewrite.onnx_fuse import GraphIndex
from albert_edge.errors import ConversionError

__all__ = ["TiedTable", "find_word_embeddings", "find_lookup_tables", "quantize_tied_table", "float_tied_decoder", "check_gemm_weights",
           "to_float16", "consumers", "pack_attention_inputs"]

log = logging.getLogger(__name__)

_FP16_MAX = float(np.finfo(np.float16).max)


@dataclass(frozen=True)
class TiedTable:
    """The word-embedding initializer and the nodes that read it."""

    name: str
    gathers: tuple[str, ...]  # Gather node names (data input)
    gemms: tuple[str, ...]  # Gemm(transB=1) node names (B input): the tied MLM decoder


def consumers(graph: onnx.GraphProto, name: str) -> list[onnx.NodeProto]:
    return [n for n in graph.node if name in n.input]


def _initializer(graph: onnx.GraphProto, name: str) -> onnx.TensorProto | None:
    return next((t for t in graph.initializer if t.name == name), None)


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def find_word_embeddings(graph: onnx.GraphProto) -> TiedTable | None:
    """The table a Gather reads with ``input_ids``, and every reader of it."""
    inits = {t.name for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Gather" and node.input[1] == "input_ids" and node.input[0] in inits:
            name = node.input[0]
            readers = consumers(graph, name)
            gathers = tuple(n.name for n in readers if n.op_type == "Gather" and n.input[0] == name)
            gemms = tuple(n.name for n in readers if _is_tied_gemm(n, name))
            others = [n for n in readers if n.name not in gathers + gemms]
            if others:
                raise ConversionError(f"the word-embedding table {name} is also read by "
                                      f"{', '.join(sorted({n.op_type for n in others}))} nodes, which albert-edge "
                                      "does not know how to quantize")
            return TiedTable(name, gathers, gemms)
    return None


def find_lookup_tables(graph: onnx.GraphProto, skip: str | None = None) -> list[TiedTable]:
    """Every other initializer read only as the data of axis-0 Gathers (ALBERT's position and
    token-type embeddings): tables whose rows can be stored int8 with a scale each."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    tables = []
    for init in graph.initializer:
        nodes = readers.get(init.name, [])
        if (init.name != skip and len(init.dims) == 2 and init.data_type == TensorProto.FLOAT and nodes
                and all(n.op_type == "Gather" and n.input[0] == init.name and n.input[1] != init.name
                        and _attr(n, "axis", 0) == 0 for n in nodes)):
            tables.append(TiedTable(init.name, tuple(n.name for n in nodes), ()))
    return tables


def _is_tied_gemm(node: onnx.NodeProto, name: str) -> bool:
    return (node.op_type == "Gemm" and len(node.input) > 1 and node.input[1] == name
            and _attr(node, "transB", 0) == 1 and _attr(node, "transA", 0) == 0
            and _attr(node, "alpha", 1.0) == 1.0 and _attr(node, "beta", 1.0) == 1.0)


def check_gemm_weights(graph: onnx.GraphProto) -> None:
    """Every Gemm's weight must have that Gemm as its only reader: onnxruntime's dynamic
    quantizer transposes every Gemm's weight in place, which would corrupt any other reader."""
    inits = {t.name for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Gemm" and len(node.input) > 1 and node.input[1] in inits:
            readers = consumers(graph, node.input[1])
            if len(readers) > 1:
                raise ConversionError(f"Gemm {node.name} shares its weight {node.input[1]} with "
                                      f"{len(readers) - 1} other node(s); it cannot be quantized in place")


def _per_row_int8(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 with one scale per row: the row a Gather picks is dequantized by its own
    scale, and each row is one output channel of the tied decoder."""
    amax = np.abs(table).max(axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(table / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def quantize_tied_table(model: onnx.ModelProto, table: TiedTable) -> list[str]:
    """Store ``table`` once as int8 (V, E) plus float scales (V,), and rewrite its readers:
    each Gather picks int8 rows and their scales and multiplies; each tied Gemm quantizes its
    input at run time and multiplies by the transposed int8 table (MatMulInteger, which
    onnxruntime fuses into DynamicQuantizeMatMul). Returns the names of the nodes it made."""
    graph = model.graph
    init = _initializer(graph, table.name)
    q, scale = _per_row_int8(numpy_helper.to_array(init).astype(np.float32))
    qname, sname = f"{table.name}_int8", f"{table.name}_row_scale"
    # The scales are stored float16 (half the bytes: 59 KB of ALBERT-base's 30000 rows; 2^-11
    # relative error beside int8's 2^-8) and cast once, which onnxruntime folds at load.
    graph.initializer.extend([numpy_helper.from_array(q, qname),
                              numpy_helper.from_array(scale.astype(np.float16), f"{sname}_fp16"),
                              numpy_helper.from_array(np.asarray([-1], dtype=np.int64), f"{sname}_axes")])
    made: list[str] = [f"{sname}__cast"]
    graph.node.insert(0, helper.make_node("Cast", [f"{sname}_fp16"], [sname], to=TensorProto.FLOAT, name=made[0]))
    by_name = {n.name: n for n in graph.node}
    for gname in table.gathers:
        made += _rewrite_gather(graph, by_name[gname], qname, sname)
    if table.gemms:
        transposed = f"{qname}_T"
        made.append(f"{qname}__transpose")
        _insert_before(graph, by_name[table.gemms[0]], [
            helper.make_node("Transpose", [qname], [transposed], perm=[1, 0], name=made[-1])])
        for gname in table.gemms:
            made += _rewrite_gemm(graph, by_name[gname], transposed, sname)
    _remove_initializer(graph, table.name)
    log.info("stored %s once as int8 with per-row scales, for %d Gather and %d Gemm reader(s)",
             table.name, len(table.gathers), len(table.gemms))
    return made


def float_tied_decoder(model: onnx.ModelProto, table: TiedTable) -> list[str]:
    """Keep the tied decoder in float as MatMul(X, Transpose(table)): no Gemm reads the table,
    so onnxruntime's dynamic quantizer, which rewrites every Gemm(transB=1) by transposing its
    weight in place, cannot corrupt the embedding lookup. Returns the nodes it made."""
    graph = model.graph
    by_name = {n.name: n for n in graph.node}
    made: list[str] = []
    if not table.gemms:
        return made
    transposed = f"{table.name}_T"
    made.append(f"{table.name}__transpose")
    _insert_before(graph, by_name[table.gemms[0]], [
        helper.make_node("Transpose", [table.name], [transposed], perm=[1, 0], name=made[-1])])
    for gname in table.gemms:
        node = by_name[gname]
        out = node.output[0]
        y = out if len(node.input) < 3 or not node.input[2] else f"{out}__nobias"
        new = [helper.make_node("MatMul", [node.input[0], transposed], [y], name=f"{gname}__matmul")]
        made.append(new[0].name)
        if y != out:
            new.append(helper.make_node("Add", [y, node.input[2]], [out], name=f"{gname}__bias"))
            made.append(new[-1].name)
        _replace(graph, node, new)
    return made


def _rewrite_gather(graph, node, qname: str, sname: str) -> list[str]:
    out, ids, base = node.output[0], node.input[1], node.name
    names = [f"{base}__rows", f"{base}__scales", f"{base}__scales3", f"{base}__float", f"{base}__dequant"]
    new = [
        helper.make_node("Gather", [qname, ids], [f"{out}__int8"], axis=0, name=names[0]),
        helper.make_node("Gather", [sname, ids], [f"{out}__scale"], axis=0, name=names[1]),
        helper.make_node("Unsqueeze", [f"{out}__scale", f"{sname}_axes"], [f"{out}__scale3"], name=names[2]),
        helper.make_node("Cast", [f"{out}__int8"], [f"{out}__float"], to=TensorProto.FLOAT, name=names[3]),
        helper.make_node("Mul", [f"{out}__float", f"{out}__scale3"], [out], name=names[4]),
    ]
    _replace(graph, node, new)
    return names


def _rewrite_gemm(graph, node, transposed: str, sname: str) -> list[str]:
    x, out, base = node.input[0], node.output[0], node.name
    names = [f"{base}__quant_x", f"{base}__matmul_int", f"{base}__cast", f"{base}__scales", f"{base}__rescale"]
    y = out if len(node.input) < 3 or not node.input[2] else f"{out}__nobias"
    new = [
        helper.make_node("DynamicQuantizeLinear", [x], [f"{base}__xq", f"{base}__xs", f"{base}__xz"], name=names[0]),
        helper.make_node("MatMulInteger", [f"{base}__xq", transposed, f"{base}__xz"], [f"{base}__acc"], name=names[1]),
        helper.make_node("Cast", [f"{base}__acc"], [f"{base}__accf"], to=TensorProto.FLOAT, name=names[2]),
        helper.make_node("Mul", [f"{base}__xs", sname], [f"{base}__scale"], name=names[3]),
        helper.make_node("Mul", [f"{base}__accf", f"{base}__scale"], [y], name=names[4]),
    ]
    if y != out:
        names.append(f"{base}__bias")
        new.append(helper.make_node("Add", [y, node.input[2]], [out], name=names[-1]))
    _replace(graph, node, new)
    return names


def _replace(graph, node, new: list) -> None:
    nodes = list(graph.node)
    i = next(k for k, n in enumerate(nodes) if n is node or (n.name == node.name and n.output == node.output))
    nodes[i:i + 1] = new
    del graph.node[:]
    graph.node.extend(nodes)


def _insert_before(graph, node, new: list) -> None:
    nodes = list(graph.node)
    i = next(k for k, n in enumerate(nodes) if n.name == node.name)
    nodes[i:i] = new
    del graph.node[:]
    graph.node.extend(nodes)


def _remove_initializer(graph, name: str) -> None:
    for container in (graph.initializer, graph.input):
        keep = [v for v in container if v.name != name]
        del container[:]
        container.extend(keep)


# -- float16 ------------------------------------------------------------------------------------

def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with float16 weights and arithmetic: float initializers and constants become
    float16 (clipped to its range), casts to float become casts to float16, and each float
    output is cast back to float32 under its own name. Integer inputs are untouched; a float
    input (an adaptive file's ``exit_setting``) stays float32 and is cast once where it enters.
    The bodies of loops (an adaptive file's passes) are rewritten the same way, their float
    loop-carried values becoming float16."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    _graph_to_float16(graph)
    for value in graph.input:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            _rename_readers(graph, value.name, f"{value.name}__fp16")
            graph.node.insert(0, helper.make_node("Cast", [value.name], [f"{value.name}__fp16"],
                                                  to=TensorProto.FLOAT16, name=f"{value.name}__to_float16"))
    outputs = {o.name for o in graph.output if o.type.tensor_type.elem_type == TensorProto.FLOAT}
    for node in graph.node:  # producers and internal readers of an output use its float16 twin
        for k, name in enumerate(node.output):
            if name in outputs:
                node.output[k] = f"{name}__fp16"
    for name in outputs:
        _rename_readers(graph, name, f"{name}__fp16")
        graph.node.append(helper.make_node("Cast", [f"{name}__fp16"], [name], to=TensorProto.FLOAT,
                                           name=f"{name}__to_float32"))
    return out


def _graph_to_float16(graph: onnx.GraphProto, inner: bool = False) -> None:
    """Float initializers, constants and casts of ``graph`` and the graphs its nodes hold in
    float16; in an ``inner`` graph (a loop's body) also its float inputs and outputs."""
    inputs = {value.name for value in graph.input}  # an optional input's default stays as the input is
    for i, tensor in enumerate(graph.initializer):
        if tensor.data_type == TensorProto.FLOAT and (inner or tensor.name not in inputs):
            graph.initializer[i].CopyFrom(_fp16_tensor(tensor))
    for node in graph.node:
        if node.op_type == "Cast" and _attr(node, "to", 0) == TensorProto.FLOAT:
            _set_attr(node, "to", TensorProto.FLOAT16)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == TensorProto.FLOAT:
                attr.t.CopyFrom(_fp16_tensor(attr.t))
            elif attr.type == onnx.AttributeProto.GRAPH:
                _graph_to_float16(attr.g, inner=True)
    if inner:
        for value in (*graph.input, *graph.output):
            if value.type.tensor_type.elem_type == TensorProto.FLOAT:
                value.type.tensor_type.elem_type = TensorProto.FLOAT16
    del graph.value_info[:]  # stale float32 shapes; the runtime infers them again


def _rename_readers(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Nodes of ``graph`` and of the graphs inside them that read ``old`` read ``new``."""
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name == old:
                node.input[k] = new
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _rename_readers(attr.g, old, new)


def _fp16_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    values = numpy_helper.to_array(tensor)
    clipped = int(np.count_nonzero(np.abs(values) > _FP16_MAX))
    if clipped:
        log.warning("%s: %d values beyond float16's range were clipped", tensor.name, clipped)
    return numpy_helper.from_array(np.clip(values, -_FP16_MAX, _FP16_MAX).astype(np.float16), tensor.name)


def _set_attr(node: onnx.NodeProto, name: str, value) -> None:
    for attr in node.attribute:
        if attr.name == name:
            attr.CopyFrom(helper.make_attribute(name, value))
            return
    node.attribute.append(helper.make_attribute(name, value))


# -- one product for Q, K and V -----------------------------------------------------------------

@dataclass(frozen=True)
class _Projection:
    """One int8 projection as quantize_dynamic writes it:
    Add(Mul(Cast(MatMulInteger(xq, weight, xz, zero)), Mul(xs, scale)), bias)."""

    nodes: tuple[onnx.NodeProto, ...]  # MatMulInteger, Cast, scale Mul, Mul, Add
    inputs: tuple[str, str, str]  # xq, xz, xs: the shared DynamicQuantizeLinear's outputs
    weight: str
    zero: str
    scale: str
    bias: str


def pack_attention_inputs(model: onnx.ModelProto) -> int:
    """Compute the Q, K and V projections read by each MultiHeadAttention as one int8 product:
    the three int8 weights (and their scales, zero points, biases) stay stored as they are, and
    one Concat per shared set, which onnxruntime folds once at load, packs them into an [H, 3H]
    matrix that every layer application reads; a Split hands Q, K and V to the attention. One
    product in place of three saves two GEMM calls per layer, which counts at short lengths; at
    long ones the Split's copy costs about what the GEMMs save. Returns how many attentions were rewritten; the others are left as they are."""
    graph = model.graph
    g = GraphIndex(graph)
    inits = g.initializers
    packs: dict[tuple[str, ...], tuple[str, int]] = {}
    made: list[onnx.NodeProto] = []
    at: dict[int, list[onnx.NodeProto]] = {}
    replaced: set[int] = set()
    for node in graph.node:
        if node.op_type != "MultiHeadAttention":
            continue
        parts = [_projection(g, name) for name in node.input[:3]]
        if any(p is None for p in parts) or len({p.inputs for p in parts}) != 1:
            continue
        key = tuple(p.weight for p in parts)
        if key not in packs:
            packs[key] = (f"{parts[0].weight}__qkv{len(packs)}", sum(int(inits[p.weight].dims[1]) for p in parts))
            made += _pack_nodes(graph, parts, inits, packs[key][0])
        base, _ = packs[key]
        sizes = [int(inits[p.weight].dims[1]) for p in parts]
        first = min(parts, key=lambda p: _index(graph, p.nodes[0])).nodes[0]
        at[id(first)] = _packed_product(graph, parts[0].inputs, base, sizes, list(node.input[:3]), node.name)
        replaced |= {id(n) for p in parts for n in p.nodes}
    if not at:
        return 0
    nodes = list(made)
    for node in graph.node:
        nodes += at.get(id(node), [])
        if id(node) not in replaced:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    log.info("Q, K and V of %d attention(s) computed as one int8 product (%d packed set(s))", len(at), len(packs))
    return len(at)


def _index(graph: onnx.GraphProto, node: onnx.NodeProto) -> int:
    return next(i for i, n in enumerate(graph.node) if n is node)


def _projection(g: GraphIndex, name: str) -> _Projection | None:
    """The int8 projection that makes ``name``, or None unless it has exactly that form and each
    step only the next for reader."""
    def made(tensor: str, op: str, single: bool = True):
        node = g.made_by(tensor, op)
        return node if node is not None and (not single or g.only_reader(tensor) is not None) else None

    add = made(name, "Add", single=False)
    mul = made(add.input[0], "Mul") if add is not None else None
    cast = made(mul.input[0], "Cast") if mul is not None else None
    product = made(cast.input[0], "MatMulInteger") if cast is not None else None
    scale_mul = made(mul.input[1], "Mul") if mul is not None else None
    if product is None or scale_mul is None or len(product.input) != 4:
        return None
    xq, weight, xz, zero = product.input
    xs, scale = scale_mul.input
    inits = g.initializers
    if not all(n in inits for n in (weight, zero, scale, add.input[1])) or len(inits[weight].dims) != 2:
        return None
    return _Projection((product, cast, scale_mul, mul, add), (xq, xz, xs), weight, zero, scale, add.input[1])


def _per_column(graph: onnx.GraphProto, inits, name: str, columns: int, made: list) -> str:
    """``name`` (a per-tensor scalar or a per-column vector) as a vector of ``columns``: a
    scalar stays stored as it is and is expanded at load (appending the Expand to ``made``)."""
    if len(inits[name].dims) == 1 and int(inits[name].dims[0]) == columns:
        return name
    shape = f"__columns_{columns}"
    if shape not in inits:
        inits[shape] = numpy_helper.from_array(np.asarray([columns], dtype=np.int64), shape)
        graph.initializer.append(inits[shape])
    made.append(helper.make_node("Expand", [name, shape], [f"{name}__columns"], name=f"{name}__columns"))
    return made[-1].output[0]


def _pack_nodes(graph: onnx.GraphProto, parts: list[_Projection], inits, base: str) -> list[onnx.NodeProto]:
    """Concat nodes (of initializers only: folded at load) for the packed weight, its zero
    points, scales and bias."""
    sizes = [int(inits[p.weight].dims[1]) for p in parts]
    made: list[onnx.NodeProto] = []
    zeros = [_per_column(graph, inits, p.zero, n, made) for p, n in zip(parts, sizes)]
    scales = [_per_column(graph, inits, p.scale, n, made) for p, n in zip(parts, sizes)]
    return made + [
        helper.make_node("Concat", [p.weight for p in parts], [f"{base}_weight"], axis=1, name=f"{base}_weight"),
        helper.make_node("Concat", zeros, [f"{base}_zero"], axis=0, name=f"{base}_zero"),
        helper.make_node("Concat", scales, [f"{base}_scale"], axis=0, name=f"{base}_scale"),
        helper.make_node("Concat", [p.bias for p in parts], [f"{base}_bias"], axis=0, name=f"{base}_bias"),
    ]


def _packed_product(graph: onnx.GraphProto, inputs: tuple[str, str, str], base: str, sizes: list[int],
                    outputs: list[str], name: str) -> list[onnx.NodeProto]:
    """The projection of every part at once, split back into ``outputs``. onnxruntime fuses the
    first five nodes with the DynamicQuantizeLinear before them into one DynamicQuantizeMatMul."""
    xq, xz, xs = inputs
    split = f"{base}_split{len(sizes)}"
    if split not in {t.name for t in graph.initializer}:
        graph.initializer.append(numpy_helper.from_array(np.asarray(sizes, dtype=np.int64), split))
    p = f"{name}__qkv"
    return [
        helper.make_node("MatMulInteger", [xq, f"{base}_weight", xz, f"{base}_zero"], [f"{p}_int"], name=f"{p}_matmul"),
        helper.make_node("Cast", [f"{p}_int"], [f"{p}_float"], to=TensorProto.FLOAT, name=f"{p}_cast"),
        helper.make_node("Mul", [xs, f"{base}_scale"], [f"{p}_scales"], name=f"{p}_scales"),
        helper.make_node("Mul", [f"{p}_float", f"{p}_scales"], [f"{p}_scaled"], name=f"{p}_rescale"),
        helper.make_node("Add", [f"{p}_scaled", f"{base}_bias"], [f"{p}_out"], name=f"{p}_bias"),
        helper.make_node("Split", [f"{p}_out", split], outputs, axis=-1, name=f"{p}_split"),
    ]
