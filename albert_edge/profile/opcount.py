"""What one call of a model file computes and moves, operator by operator, at a given batch x
sequence length: multiply-accumulates (MACs) of every matrix product, element operations of the
rest, bytes of stored weights read and bytes of activations read and written, by precision.

The shapes come from the runtime that runs the file, not from a graph walker of our own: the
file is run once at batch x seq_len with graph optimizations off, so every node is the file's
own and each application of a shared ALBERT layer is its own node (the exporters unroll the L
layer applications; the G weight sets are stored once and read L/G times each):

- ONNX: onnxruntime's profiler lists every node with its input and output shapes and the bytes
  of its stored-weight inputs (``parameter_size``; weight pre-packing is turned off so it counts).
  The ``onnx`` package is not needed (it is build-side); onnxruntime alone cannot list stored
  tensors, but its profiler can.
- TFLite: the interpreter (no delegate, all tensors kept) is invoked once; its op list names each
  op's tensors and its tensor details give their final shapes and types. A tensor no op writes and
  that is not a model input is a stored weight.

Device side: onnxruntime or a TFLite interpreter, numpy; no torch, no tensorflow.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RuntimeUnavailable, install_line, optional_import
from ..formats import tflite_reader
from ..formats.kinds import ONNX, TFLITE, of_file

__all__ = ["OpCost", "GraphCount", "count"]

# Matrix products, by the names onnxruntime and TFLite give them: MACs = output elements x K.
MATMULS = frozenset({"MatMul", "MatMulInteger", "QLinearMatMul", "Gemm", "FusedMatMul",
                     "FULLY_CONNECTED", "BATCH_MATMUL"})
# Attention ops that hold two products of activations: Q x K^T and softmax x V (onnxruntime's
# com.microsoft.MultiHeadAttention, which albert-edge's int8-dynamic .onnx files use).
ATTENTIONS = frozenset({"MultiHeadAttention"})
# Ops that read only the rows they gather from a stored table, not the whole table.
GATHERS = frozenset({"Gather", "GatherElements", "GATHER", "EMBEDDING_LOOKUP"})
# Element operations per output element for the ops that do more than one (the rest count one).
# Ops that only move or re-label data count none.
_FLOPS_PER_ELEMENT = {"LayerNormalization": 8, "Softmax": 5, "SOFTMAX": 5, "Gelu": 8, "GELU": 8,
                      "Erf": 8, "Tanh": 4, "TANH": 4, "RSQRT": 2, "MEAN": 1,
                      **dict.fromkeys(("Reshape", "Transpose", "Shape", "Concat", "Squeeze", "Unsqueeze", "Cast",
                                       "Identity", "Slice", "RESHAPE", "TRANSPOSE", "SHAPE", "CONCATENATION",
                                       "SQUEEZE", "CAST", "SLICE", "STRIDED_SLICE", "PACK", *GATHERS), 0)}
# The precision a matrix product runs at, from the element type of its first two inputs.
_PRECISION = {"int8": "int8", "uint8": "int8", "int16": "int8", "float16": "fp16", "float": "fp32",
              "float32": "fp32", "double": "fp32", "float64": "fp32"}
_ITEMSIZE = {"float": 4, "float32": 4, "float16": 2, "double": 8, "float64": 8, "int64": 8, "int32": 4,
             "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


@dataclass(frozen=True)
class OpCost:
    """One node of one call. ``macs`` for matrix products, ``flops`` (element operations) for the
    rest; bytes of stored weights read and of activations read + written."""

    name: str
    op: str
    precision: str  # "fp32" | "fp16" | "int8" for the data it computes on; "int" for index/shape ops
    macs: int
    flops: int
    weight_bytes: int
    activation_bytes: int


@dataclass(frozen=True)
class GraphCount:
    file: str
    format: str
    batch: int
    seq_len: int
    ops: tuple[OpCost, ...]

    @property
    def macs(self) -> int:
        return sum(o.macs for o in self.ops)

    def by_precision(self) -> dict[str, dict[str, int]]:
        """{precision: {macs, flops, weight_bytes, activation_bytes}}."""
        totals: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(
            ("macs", "flops", "weight_bytes", "activation_bytes"), 0))
        for o in self.ops:
            row = totals[o.precision]
            row["macs"] += o.macs
            row["flops"] += o.flops
            row["weight_bytes"] += o.weight_bytes
            row["activation_bytes"] += o.activation_bytes
        return dict(totals)

    def by_op(self) -> dict[str, dict[str, int]]:
        """{op type: {count, macs, flops, weight_bytes, activation_bytes}}."""
        totals: dict[str, dict[str, int]] = {}
        for o in self.ops:
            row = totals.setdefault(o.op, dict.fromkeys(("count", "macs", "flops", "weight_bytes",
                                                         "activation_bytes"), 0))
            row["count"] += 1
            row["macs"] += o.macs
            row["flops"] += o.flops
            row["weight_bytes"] += o.weight_bytes
            row["activation_bytes"] += o.activation_bytes
        return totals

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "format": self.format, "batch": self.batch, "seq_len": self.seq_len,
                "macs": self.macs, "by_precision": self.by_precision(), "by_op": self.by_op(),
                "ops": [asdict(o) for o in self.ops]}


@dataclass(frozen=True)
class _Node:
    """What the runtime tells about one node: (dtype, shape) of its inputs and outputs."""

    name: str
    op: str
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    outputs: tuple[tuple[str, tuple[int, ...]], ...]
    weight_bytes: int
    activation_bytes: int


def count(path: str | os.PathLike, batch: int = 1, seq_len: int = 128) -> GraphCount:
    """Every node's cost for one call of the model file at ``path`` on ``batch`` sequences of
    ``seq_len`` tokens. Runs the file once (a few hundred ms for ALBERT-base)."""
    path = Path(path)
    fmt = of_file(path)
    if fmt not in _READERS:
        raise RuntimeUnavailable(f"{path}: operator costs are counted for .onnx and .tflite files, not .{path.suffix[1:]}")
    nodes = _READERS[fmt](path, batch, seq_len)
    return GraphCount(file=str(path), format=fmt.name, batch=batch, seq_len=seq_len,
                      ops=tuple(_cost(n) for n in nodes))


def _cost(node: _Node) -> OpCost:
    out_elements = sum(_size(shape) for _, shape in node.outputs)
    data = [dtype for dtype, _ in node.inputs[:2]] or [dtype for dtype, _ in node.outputs]
    precision = next((_PRECISION[d] for d in data if d in _PRECISION and _PRECISION[d] != "fp32"),
                     "fp32" if any(d in _PRECISION for d in data) else "int")
    weights = node.weight_bytes
    if node.op in GATHERS:
        weights = min(weights, sum(_size(s) * _ITEMSIZE.get(d, 4) for d, s in node.outputs))
    if node.op in MATMULS and len(node.inputs) >= 2:
        macs = out_elements * _contracted(node.op, node.inputs[0][1], node.inputs[1][1], node.outputs[0][1])
        flops = 0
    elif node.op in ATTENTIONS and len(node.inputs) >= 2:
        # query (B, Tq, H) and key (B, Tk, H), already projected: B*Tq*Tk*H MACs per product, over
        # all heads. The softmax's element operations are not counted (the head count is an attribute).
        (batch, t_query, hidden), t_key = node.inputs[0][1][-3:], node.inputs[1][1][-2]
        macs = 2 * batch * t_query * t_key * hidden
        flops = 0
    else:
        macs = 0
        flops = out_elements * _FLOPS_PER_ELEMENT.get(node.op, 1) if precision != "int" else 0
    return OpCost(name=node.name, op=node.op, precision=precision, macs=macs, flops=flops,
                  weight_bytes=weights, activation_bytes=node.activation_bytes)


def _contracted(op: str, a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...]) -> int:
    """K of a matrix product from its shapes alone, whatever the transposes: per batch entry A
    holds M*K, B holds K*N and the output M*N elements, so K = sqrt(MK * KN / MN) (last two axes
    of each; batch axes may broadcast). TFLite's FULLY_CONNECTED may flatten its rows, but its
    weights are always N x K."""
    if op == "FULLY_CONNECTED":
        return int(b[-1]) if b else 0
    mn = _size(out[-2:])
    return int(round(math.sqrt(_size(a[-2:]) * _size(b[-2:]) / mn))) if mn else 0


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _feeds(inputs: list[tuple[str, str]], batch: int, seq_len: int) -> dict[str, np.ndarray]:
    """Ones for ids and masks (token id 1 is in every vocabulary), zeros for token types."""
    return {name: (np.zeros if "token_type" in name else np.ones)((batch, seq_len), dtype=np.dtype(dtype))
            for name, dtype in inputs}


# --- ONNX: onnxruntime's profiler -----------------------------------------------------------------

def _onnx_nodes(path: Path, batch: int, seq_len: int) -> list[_Node]:
    try:
        ort = optional_import("onnxruntime")
    except ImportError:
        raise RuntimeUnavailable(f"counting .onnx operators needs onnxruntime ({install_line('onnx')})") from None
    from ..runtime.onnx_engine import ORT_TYPES

    with tempfile.TemporaryDirectory(prefix="albert-edge-opcount-") as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the file's own nodes
        options.add_session_config_entry("session.disable_prepacking", "1")  # so weight inputs are counted
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "count")
        try:
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            inputs = [(i.name, ORT_TYPES.get(i.type, "int64")) for i in session.get_inputs()]
            session.run(None, _feeds(inputs, batch, seq_len))
        except Exception as exc:  # onnxruntime raises its own exception types
            raise RuntimeUnavailable(f"{path}: onnxruntime cannot run it at batch {batch} x {seq_len}: "
                                     f"{str(exc).strip().splitlines()[0]}") from None
        trace = json.loads(Path(session.end_profiling()).read_text())
    nodes = []
    for event in trace:
        args = event.get("args") or {}
        if event.get("cat") != "Node" or "op_name" not in args or not event["name"].endswith("_kernel_time"):
            continue
        nodes.append(_Node(
            name=event["name"][: -len("_kernel_time")], op=args["op_name"],
            inputs=tuple(_typed(t) for t in args.get("input_type_shape", [])),
            outputs=tuple(_typed(t) for t in args.get("output_type_shape", [])),
            weight_bytes=int(args.get("parameter_size", 0)),
            activation_bytes=int(args.get("activation_size", 0)) + int(args.get("output_size", 0)),
        ))
    return nodes


def _typed(entry: dict[str, list[int]]) -> tuple[str, tuple[int, ...]]:
    (dtype, shape), = entry.items()
    return dtype, tuple(int(d) for d in shape)


# --- TFLite: the interpreter's op list and tensor details ---------------------------------------

def _tflite_nodes(path: Path, batch: int, seq_len: int) -> list[_Node]:
    from ..runtime.litert import tflite_interpreter

    interpreter_cls, name = tflite_interpreter()
    resolver = sys.modules[interpreter_cls.__module__].OpResolverType  # imported with the class
    try:
        interp = interpreter_cls(model_path=str(path), num_threads=1, experimental_preserve_all_tensors=True,
                                 experimental_op_resolver_type=resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        details = interp.get_input_details()
        for d in details:
            interp.resize_tensor_input(d["index"], [batch, seq_len])
        interp.allocate_tensors()
        feeds = _feeds([(d["name"], np.dtype(d["dtype"]).name) for d in details], batch, seq_len)
        for d in details:
            interp.set_tensor(d["index"], feeds[d["name"]])
        interp.invoke()  # dynamic shapes are only final after a call
        ops = interp._get_ops_details()
        tensors = {int(t["index"]): t for t in interp.get_tensor_details()}
    except (ValueError, RuntimeError) as exc:
        raise RuntimeUnavailable(f"{path}: {name} cannot run it at batch {batch} x {seq_len}: "
                                 f"{str(exc).strip().splitlines()[0]}") from None
    loops = _loops(path, interp) if any(op["op_name"] == "WHILE" for op in ops) else []
    written = {int(i) for op in ops for i in op["outputs"]} | {int(d["index"]) for d in details}

    def typed(index: int) -> tuple[str, tuple[int, ...]]:
        t = tensors[index]
        return np.dtype(t["dtype"]).name, tuple(int(d) for d in t["shape"])

    def nbytes(index: int) -> int:
        dtype, shape = typed(index)
        return _size(shape) * np.dtype(dtype).itemsize

    nodes = []
    for op in ops:
        if op["op_name"] == "WHILE":  # its body's operators come below, once per iteration
            continue
        ins = [int(i) for i in op["inputs"] if int(i) >= 0 and int(i) in tensors]
        outs = [int(i) for i in op["outputs"] if int(i) in tensors]
        nodes.append(_Node(
            name=f"{op['op_name']}_{op['index']}", op=op["op_name"],
            inputs=tuple(typed(i) for i in ins), outputs=tuple(typed(i) for i in outs),
            weight_bytes=sum(nbytes(i) for i in ins if i not in written),
            activation_bytes=sum(nbytes(i) for i in ins if i in written) + sum(nbytes(i) for i in outs),
        ))
    return nodes + [node for body, trips in loops for _ in range(trips) for node in body]


def _loops(path: Path, interp) -> list[tuple[list[_Node], int]]:
    """Each WHILE of the main graph (convert --layers loop) as (its body's nodes, its trip count).
    The interpreter lists the main graph's operators only; the body's come from the file, with
    the shapes the interpreter gave its tensors in the last call (the same in every iteration),
    and the trip count from the loop condition's bound."""
    unreadable = RuntimeUnavailable(f"{path.name} holds its layers in a loop whose body or trip count this "
                                    "operator count cannot read; count an unrolled file of the same model "
                                    "(convert --layers unrolled)")
    schema = tflite_reader.schema_module()  # ai-edge-litert's bindings, or the standard-library stand-in
    model = schema.Model.GetRootAs(path.read_bytes(), 0)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    wrapper = interp._interpreter

    def op_name(op) -> str:
        code = model.OperatorCodes(op.OpcodeIndex())
        return names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "?")

    def constant(graph, index: int) -> bool:
        buffer = model.Buffers(graph.Tensors(index).Buffer())
        return buffer.DataLength() > 0 or buffer.Size() > 0

    def typed(sg: int, index: int) -> tuple[str, tuple[int, ...]]:
        return np.dtype(wrapper.TensorType(index, sg)).name, tuple(int(d) for d in wrapper.TensorSize(index, sg))

    main = model.Subgraphs(0)
    loops = []
    for op in map(main.Operators, range(main.OperatorsLength())):
        if op_name(op) != "WHILE":
            continue
        options = schema.WhileOptions()
        table = op.BuiltinOptions()
        if table is None:
            raise unreadable
        options.Init(table.Bytes, table.Pos)
        cond, sg = options.CondSubgraphIndex(), options.BodySubgraphIndex()
        condition = model.Subgraphs(cond)
        bounds = {int(np.frombuffer(model.Buffers(condition.Tensors(i).Buffer()).DataAsNumpy().tobytes(), np.int32)[0])
                  for c in map(condition.Operators, range(condition.OperatorsLength())) if op_name(c) == "LESS"
                  for i in c.InputsAsNumpy() if constant(condition, i)}
        if len(bounds) != 1:
            raise unreadable
        body = model.Subgraphs(sg)
        written = {int(i) for i in body.InputsAsNumpy()}
        written |= {int(o) for b in map(body.Operators, range(body.OperatorsLength())) for o in b.OutputsAsNumpy()}
        nodes = []
        for j in range(body.OperatorsLength()):
            b = body.Operators(j)
            ins = [int(i) for i in b.InputsAsNumpy() if int(i) >= 0]
            outs = [int(i) for i in b.OutputsAsNumpy()]
            sizes = {i: _size(typed(sg, i)[1]) * np.dtype(typed(sg, i)[0]).itemsize for i in (*ins, *outs)}
            nodes.append(_Node(
                name=f"{op_name(b)}_loop{sg}.{j}", op=op_name(b),
                inputs=tuple(typed(sg, i) for i in ins), outputs=tuple(typed(sg, i) for i in outs),
                weight_bytes=sum(sizes[i] for i in ins if i not in written and constant(body, i)),
                activation_bytes=sum(sizes[i] for i in ins if i in written) + sum(sizes[i] for i in outs),
            ))
        loops.append((nodes, bounds.pop()))
    return loops


_READERS = {ONNX: _onnx_nodes, TFLITE: _tflite_nodes}
