"""Export an ALBERT model to ONNX with each weight stored once.

The TorchScript exporter unrolls the L layer applications. Left alone, it constant-folds a
transposed copy of each shared Linear weight per application and merges them again by value
behind Identity nodes; a tied weight used both as it is and transposed (the word embeddings and
the MLM decoder) stays stored twice. So the trace runs with every Linear as ``x @ W^T`` with W^T
held once per Linear (``_linears_as_matmul``), and ``deduplicate_weights`` - the named step,
built from small steps: inline Identity-of-initializer, find duplicates (exact, reshaped,
transposed), map names, rewrite inputs, drop the copies - removes whatever copy is left.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import sys
import tempfile
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from albert_edge import __version__
from albert_edge.errors import ConversionError

from albert_edge.formats.graph import INPUT_NAMES, StoredTensor
from albert_edge.formats.weights import find_duplicates
from albert_edge.rewrite.initializers import drop_unused_initializers, graph_outputs, remove_initializers
from albert_edge.rewrite.passes import Pass, in_place, run_passes

from .onnx_static import STATIC_OPSET, make_static

__all__ = ["export", "deduplicate_weights", "drop_unused_initializers", "INPUT_NAMES", "MIN_OPSET", "DEFAULT_OPSET", "EXTERNAL_DATA_THRESHOLD"]

log = logging.getLogger(__name__)

MIN_OPSET = 17
# Opset 20 has GELU's tanh form as one Gelu node; below it the exporter spells it out as eight
# element-wise nodes that onnxruntime does not fuse, ~10% of an int8 ALBERT-base call.
DEFAULT_OPSET = 20
# Weights above this many bytes go to one external data file beside the .onnx: a protobuf
# cannot exceed 2 GiB, and the graph itself needs some room.
EXTERNAL_DATA_THRESHOLD = 2**31 - 2**26


def export(model, out_path: str | os.PathLike, *, seq_len: int = 128, opset: int | None = None,
           external_data_threshold: int = EXTERNAL_DATA_THRESHOLD, static: bool = False) -> Path:
    """Write ``model`` (eval mode, forward(input_ids, attention_mask, token_type_ids)) to
    ``out_path`` as ONNX: int64 inputs with dynamic batch and sequence axes, outputs named
    ``model.output_names``, each weight stored once. When the weights pass
    ``external_data_threshold`` bytes they go to ``<out_path name>.data`` beside it.
    ``seq_len`` is only the length of the example the exporter traces with.

    ``static``: int32 inputs of the fixed shape ``[1, seq_len]``, the graph written for a phone's
    NPU (:mod:`.onnx_static`: shapes folded, LayerNorm and GELU in element-wise ops), in opset
    ``STATIC_OPSET`` unless ``opset`` says otherwise. ``opset`` defaults to ``DEFAULT_OPSET``."""
    if opset is None:
        opset = STATIC_OPSET if static else DEFAULT_OPSET
    if opset < MIN_OPSET:
        raise ConversionError(f"opset {opset} is too old: ONNX export needs opset {MIN_OPSET} or newer")
    out_path = Path(out_path)
    if not out_path.parent.is_dir():
        raise ConversionError(f"cannot write {out_path}: {out_path.parent} is not a directory")
    if _is_adaptive(model):
        # The passes in Loop nodes, put together from traced pieces whose weights are one
        # initializer each by name: no copy for the passes to remove (verify() checks it).
        proto = _adaptive_proto(model, opset)
    else:
        with tempfile.TemporaryDirectory(prefix=".onnx-export-", dir=out_path.parent) as tmp:
            traced = Path(tmp) / "traced.onnx"
            _trace(model, traced, seq_len=seq_len, opset=opset, static=static)
            proto = onnx.load(str(traced), load_external_data=True)
        proto = run_passes(proto, STATIC_PASSES if static else PASSES)
    proto.producer_name, proto.producer_version = "albert-edge", __version__
    _save(proto, out_path, external_data_threshold)
    try:
        onnx.checker.check_model(str(out_path))
    except onnx.checker.ValidationError as exc:
        raise ConversionError(f"exported ONNX graph is invalid: {str(exc).splitlines()[0]}") from None
    return out_path


# The rewrites of the traced graph, in order: each weight stored once (in place: no second copy of
# every weight in memory); for a static file, then the graph a phone's NPU takes whole.
DEDUPLICATE_WEIGHTS: Pass[onnx.ModelProto] = Pass("deduplicate weights", lambda proto: deduplicate_weights(proto, inplace=True))
STATIC_GRAPH: Pass[onnx.ModelProto] = in_place("static graph for an NPU", make_static)
PASSES = (DEDUPLICATE_WEIGHTS,)
STATIC_PASSES = (*PASSES, STATIC_GRAPH)


def _is_adaptive(model) -> bool:
    from .task_heads import AdaptiveClassifier

    return isinstance(model, AdaptiveClassifier)


def _adaptive_proto(model, opset: int) -> onnx.ModelProto:
    from .onnx_adaptive import adaptive_proto

    return adaptive_proto(model, opset, _linears_as_matmul)


def _trace(model, path: Path, *, seq_len: int, opset: int, static: bool = False) -> None:
    import torch

    config = model.config
    gen = torch.Generator().manual_seed(0)
    if static:  # the one shape the file takes: every shape in the graph is a constant
        ids = torch.randint(0, config.vocab_size, (1, min(seq_len, config.max_position_embeddings)), generator=gen)
    else:
        T = max(2, min(seq_len, config.max_position_embeddings))  # length 1 would be traced as a constant
        ids = torch.randint(0, config.vocab_size, (2, T), generator=gen)
    example = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    outputs = list(model.output_names)
    dynamic = None
    if not static:
        dynamic = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
        for name in outputs:
            dynamic[name] = {0: "batch"} if _per_sequence(model, name) else {0: "batch", 1: "sequence"}
    with warnings.catch_warnings(), _linears_as_matmul(model), _stdout_to_stderr():
        warnings.simplefilter("ignore")  # tracer and deprecation chatter; the result is verified
        try:
            torch.onnx.export(
                model.eval(), example, str(path), dynamo=False, opset_version=opset,
                input_names=list(INPUT_NAMES), output_names=outputs, dynamic_axes=dynamic,
                do_constant_folding=True,
            )
        except Exception as exc:  # torch raises many types; the message is what matters
            raise ConversionError(f"torch.onnx.export failed: {str(exc).strip().splitlines()[0]}") from None


@contextlib.contextmanager
def _stdout_to_stderr():
    """The exporter's C++ side prints graphs to stdout when it fails; stdout is for results
    (``--json``), so point file descriptor 1 at stderr meanwhile."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no usable stdout at all
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def _linears_as_matmul(model):
    """While tracing, every nn.Linear computes ``x @ W^T + b`` with W^T held once, as a parameter
    of its own (``weight_t``). The exporter then stores one transposed weight per Linear, instead
    of constant-folding a transposed copy per layer application and comparing them all pairwise
    to merge them again (slow for big models). The model is restored afterwards."""
    import torch

    patched = []
    try:
        for module in model.modules():  # each shared module once
            if isinstance(module, torch.nn.Linear):
                weight_t = torch.nn.Parameter(module.weight.detach().t().contiguous(), requires_grad=False)
                module.register_parameter("weight_t", weight_t)
                module.forward = types.MethodType(_matmul_forward, module)
                patched.append(module)
        yield
    finally:
        for module in patched:
            del module.forward  # back to nn.Linear.forward
            del module._parameters["weight_t"]


def _matmul_forward(self, x):
    import torch

    y = torch.matmul(x, self.weight_t)
    return y if self.bias is None else y + self.bias


def _per_sequence(model, name: str) -> bool:
    """Whether output ``name`` has one row per example (no sequence axis)."""
    if name in ("pooler_output", "sop_logits"):
        return True
    # Sequence classification returns one row of logits per example, not per token.
    return name == "logits" and type(model).__name__ == "AlbertForSequenceClassification"


def _save(proto: onnx.ModelProto, path: Path, threshold: int) -> None:
    weight_bytes = sum(_nbytes(t) for t in proto.graph.initializer)
    if weight_bytes > threshold:
        location = path.name + ".data"
        log.info("weights are %d bytes: writing them to %s", weight_bytes, location)
        onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=location, size_threshold=1024)
    else:
        onnx.save_model(proto, str(path))


def _nbytes(tensor: onnx.TensorProto) -> int:
    itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize


# -- deduplication -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Copy:
    """Initializer ``name`` holds ``kept`` transformed by ``kind``."""

    name: str
    kept: str
    kind: str


def deduplicate_weights(proto: onnx.ModelProto, inplace: bool = False) -> onnx.ModelProto:
    """Store every weight once: returns a model in which consumers of a copied initializer read
    the original (directly, or through Reshape/Gemm(transB)/Transpose nodes for reshaped or
    transposed copies), and the copies are gone. A new model unless ``inplace``."""
    if inplace:
        model = proto
    else:
        model = onnx.ModelProto()
        model.CopyFrom(proto)
    graph = model.graph
    _inline_identities(graph)
    arrays = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    copies = _find_copies(graph, arrays)
    renames = {c.name: c.kept for c in copies if c.kind == "exact"}
    _rewrite_inputs(graph, renames)
    for copy in copies:
        if copy.kind == "reshaped":
            _read_reshaped(graph, copy, arrays)
        elif copy.kind == "transposed":
            _read_transposed(graph, copy, arrays)
    drop_unused_initializers(graph)
    if copies:
        log.info("stored %d weight copies once: %s", len(copies), ", ".join(f"{c.name}->{c.kept}" for c in copies))
    return model


def _inline_identities(graph) -> None:
    """Identity(initializer) -> the initializer itself, so tools that look for a weight as a
    node's direct input (quantizers, fusions) find it."""
    initializers = {t.name for t in graph.initializer}
    keep, renames = [], {}
    for node in graph.node:
        if node.op_type == "Identity" and node.input[0] in initializers and node.output[0] not in graph_outputs(graph):
            renames[node.output[0]] = node.input[0]
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    _rewrite_inputs(graph, renames)


def _find_copies(graph, arrays: dict[str, np.ndarray]) -> list[_Copy]:
    """Duplicated initializers, each mapped to the one that stays. Parameter names (not the
    exporter's ``onnx::`` temporaries) are kept in preference."""
    order = sorted(range(len(graph.initializer)),
                   key=lambda i: (graph.initializer[i].name.startswith("onnx::"), i))
    tensors = [StoredTensor(graph.initializer[i].name, arrays[graph.initializer[i].name]) for i in order]
    copies = []
    for dup in find_duplicates(tensors):
        if dup.kind in ("exact", "reshaped", "transposed"):
            copies.append(_Copy(dup.name, dup.original, dup.kind))
        else:
            log.warning("%s holds the values of %s in another order; left as it is", dup.name, dup.original)
    return copies


def _rewrite_inputs(graph, renames: dict[str, str]) -> None:
    if not renames:
        return
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in renames:
                node.input[i] = renames[name]


def _add_const(graph, name: str, values: list[int]) -> str:
    if name not in {t.name for t in graph.initializer}:
        graph.initializer.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
    return name


def _prepend(graph, nodes: list) -> None:
    """Nodes that read only initializers go first, so the graph stays topologically sorted."""
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + rest)


def _read_reshaped(graph, copy: _Copy, arrays: dict[str, np.ndarray]) -> None:
    shape = _add_const(graph, f"{copy.name}__shape", list(arrays[copy.name].shape))
    _prepend(graph, [helper.make_node("Reshape", [copy.kept, shape], [copy.name], name=f"{copy.name}__reshape")])
    _remove_initializer(graph, copy.name)


def _read_transposed(graph, copy: _Copy, arrays: dict[str, np.ndarray]) -> None:
    kept, dup = arrays[copy.kept], arrays[copy.name]
    consumers = [n for n in graph.node if copy.name in n.input]
    if kept.ndim == 2 and dup.shape == kept.T.shape and consumers and all(
        n.op_type == "MatMul" and list(n.input).index(copy.name) == 1 and n.input[0] != copy.name for n in consumers
    ):
        for node in consumers:
            _matmul_to_gemm(graph, node, copy.kept, kept.shape)
    else:
        perm = _permutation(kept, dup)
        if perm is None:
            log.warning("%s is a transposed copy of %s that no single Transpose rebuilds; left as it is",
                        copy.name, copy.kept)
            return
        out = copy.name if dup.shape == tuple(kept.shape[p] for p in perm) else f"{copy.name}__transposed"
        nodes = [helper.make_node("Transpose", [copy.kept], [out], perm=list(perm), name=f"{copy.name}__transpose")]
        if out != copy.name:
            shape = _add_const(graph, f"{copy.name}__shape", list(dup.shape))
            nodes.append(helper.make_node("Reshape", [out, shape], [copy.name], name=f"{copy.name}__reshape"))
        _prepend(graph, nodes)
    _remove_initializer(graph, copy.name)


def _matmul_to_gemm(graph, node, weight: str, weight_shape: tuple[int, ...]) -> None:
    """MatMul(X, W^T) -> Reshape(Gemm(Reshape(X, [-1, K]), W, transB=1), Shape(X)[:-1] + [N]),
    so the (N, K) weight is read as stored instead of through a transposed copy."""
    N, K = (int(d) for d in weight_shape)
    x, y, base = node.input[0], node.output[0], node.name or node.output[0]
    flat_shape = _add_const(graph, f"__flat_{K}", [-1, K])
    last = _add_const(graph, f"__last_{N}", [N])
    new = [
        helper.make_node("Shape", [x], [f"{base}__lead"], end=-1, name=f"{base}__shape"),
        helper.make_node("Concat", [f"{base}__lead", last], [f"{base}__out_shape"], axis=0, name=f"{base}__concat"),
        helper.make_node("Reshape", [x, flat_shape], [f"{base}__flat"], name=f"{base}__flatten"),
        helper.make_node("Gemm", [f"{base}__flat", weight], [f"{base}__gemm"], transB=1, name=f"{base}__gemm"),
        helper.make_node("Reshape", [f"{base}__gemm", f"{base}__out_shape"], [y], name=f"{base}__unflatten"),
    ]
    nodes = list(graph.node)
    i = next(k for k, n in enumerate(nodes) if n is node)
    nodes[i:i + 1] = new
    del graph.node[:]
    graph.node.extend(nodes)


def _permutation(kept: np.ndarray, dup: np.ndarray) -> tuple[int, ...] | None:
    """The axis permutation of ``kept`` that, read flat, gives ``dup``'s values."""
    flat = np.ascontiguousarray(dup).reshape(-1)
    for perm in itertools.permutations(range(kept.ndim)):
        if np.array_equal(np.ascontiguousarray(kept.transpose(perm)).reshape(-1), flat):
            return perm
    return None


def _remove_initializer(graph, name: str) -> None:
    remove_initializers(graph, {name})
