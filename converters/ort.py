"""Export an ALBERT model to ONNX Runtime's own format (.ort), what ONNX Runtime Mobile loads.

The model is exported to ONNX (:mod:`.onnx`, each weight stored once) and onnxruntime itself
converts it: an ``InferenceSession`` that optimizes the graph and saves it in ORT format, as
``onnxruntime.tools.convert_onnx_models_to_ort`` does (fixed optimization style, no NCHWc
layout), at the hardware-independent ``extended`` level (:data:`OPTIMIZATION`), with the
fusions albert_edge.runtime leaves out left out here too. Beside the .ort files go the two
configurations a reduced-size onnxruntime build is made from (``build.sh
--include_ops_by_config``): ``required_operators.config`` and, with each operator's types,
``required_operators_and_types.config`` (for ``--enable_reduced_operator_type_support``),
covering every .ort of the conversion.

onnxruntime's optimizers may copy a weight (a constant-folded transpose per layer
application, a packed initializer per use): the .ort is read back with the device side's
reader (albert_edge.formats.ort_reader, what ``inspect`` reads) and fails verification if any
weight is stored twice. One such copy is known and prevented (:func:`keep_shared_unfolded`):
the int8 word table, read by the embedding lookup and, through a Transpose, by the tied MLM
decoder, which constant folding at every level above ``disable`` stored a second time. It runs through albert_edge.runtime.Session, a plain onnxruntime
``InferenceSession`` (the same C++ as ONNX Runtime Mobile), against PyTorch.

int8 (``scheme="int8-dynamic"``): the fp32 .onnx is quantized by :mod:`albert_edge.quantize`
(its recipe, its checks, its accuracy against the fp32 file on held-out text) and converted in
turn; the .ort must give the int8 .onnx's outputs within :data:`TWIN_ATOL`
(:func:`quantized_file`).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from albert_edge.errors import ConversionError, first_line
from albert_edge.files import staged_files
from albert_edge.rewrite.passes import Pass, in_place, run_passes

from albert_edge.formats.graph import GraphContents
from albert_edge.quantize.schemes import AT_CONVERSION

from .verify import TOLERANCES

__all__ = ["export", "to_ort", "write_operator_configs", "read_contents", "verify_options", "quantized_file", "ort_twin", "OrtTwin",
           "OPTIMIZATION", "STATIC_OPTIMIZATION", "LEVELS", "TWIN_ATOL", "OPERATOR_CONFIGS"]

log = logging.getLogger(__name__)

# onnxruntime's optimization levels by the names its converter takes (--optimization_level).
LEVELS = ("disable", "basic", "extended", "all")
# "extended": constant folding, eliminations and fusions into onnxruntime's own operators
# (FusedMatMul, FastGelu, DynamicQuantizeMatMul); "all" adds layout changes for the CPU it runs
# on, which a file for phones must not carry.
OPTIMIZATION = "extended"
# A static file for NNAPI / Core ML: constant folding and eliminations only, the graph those
# providers are given (onnxruntime's mobile checker reads a file at this level too).
STATIC_OPTIMIZATION = "basic"
# Never in an .ort: NCHWc layouts are x86-only (onnxruntime's converter leaves them out for
# ARM), and SkipLayerNormalization is slower than what it fuses (albert_edge.runtime.onnx_engine).
_LEFT_OUT = ("NchwcTransformer",)

# The configurations of a reduced build, written from every .ort of a conversion.
OPERATOR_CONFIGS = {False: "required_operators.config", True: "required_operators_and_types.config"}

# The int8 .ort against the int8 .onnx it was converted from, both run by albert_edge.runtime.Session
# (SkipLayerNormalization unfused in both): the same kernels run, only the order of float sums may
# differ (measured: identical). A plain onnxruntime session of the .onnx fuses it, and an int8
# step of some decoder input flips: up to 9e-3 on the builtin model's MLM logits at 128 tokens.
TWIN_ATOL = TOLERANCES["ort"].twin_atol
_TWIN_LENGTHS = (1, 5, 16, 64, 128)


def export(model, out_path: str | os.PathLike, *, seq_len: int = 128, opset: int | None = None,
           optimization: str | None = None, static: bool = False) -> Path:
    """Write ``model`` (eval mode, forward(input_ids, attention_mask, token_type_ids)) to
    ``out_path`` as an .ort: the ONNX export of :mod:`.onnx` (int64 inputs with dynamic batch and
    sequence axes), optimized by onnxruntime at ``optimization`` (default :data:`OPTIMIZATION`)
    and saved in ORT format; the reduced-build operator configurations are (re)written beside it.

    ``static``: the static ``[1, seq_len]`` export for a phone's NPU (:mod:`.onnx_static`),
    optimized at :data:`STATIC_OPTIMIZATION` unless told: the extended level's fusions
    (LayerNormalization, FastGelu, FusedMatMul) are operators NNAPI and Core ML do not take."""
    from . import onnx as onnx_export

    out_path = Path(out_path)
    if not out_path.parent.is_dir():
        raise ConversionError(f"cannot write {out_path}: {out_path.parent} is not a directory")
    optimization = optimization or (STATIC_OPTIMIZATION if static else OPTIMIZATION)
    with tempfile.TemporaryDirectory(prefix=".ort-export-", dir=out_path.parent) as tmp:
        source = Path(tmp) / "model.onnx"
        onnx_export.export(model, source, seq_len=seq_len, opset=opset, static=static)
        to_ort(source, out_path, optimization=optimization)
    write_operator_configs(out_path.parent)
    return out_path


def to_ort(onnx_path: str | os.PathLike, ort_path: str | os.PathLike, *, optimization: str = OPTIMIZATION,
           keep_shared: bool = True) -> Path:
    """Convert the .onnx at ``onnx_path`` to an .ort at ``ort_path`` with onnxruntime's own
    serializer, its graph optimized at ``optimization`` (one of LEVELS). With ``keep_shared``
    no weight is folded into a second one: a table read as it is by lookups and transposed by a
    product is stored transposed once (:func:`gather_from_transposed`), any other weight read by
    a folding node and by another node is kept unfolded (:func:`keep_shared_unfolded`)."""
    if optimization not in LEVELS:
        raise ConversionError(f"unknown optimization level {optimization!r}; choose from {', '.join(LEVELS)}")
    ort_path = Path(ort_path)
    if not keep_shared:
        return _serialize(Path(onnx_path), ort_path, optimization)
    import onnx

    proto = onnx.load(str(onnx_path))
    changed: list[str] = []
    proto = run_passes(proto, keep_shared_passes(changed))
    if not changed:
        return _serialize(Path(onnx_path), ort_path, optimization)
    with tempfile.TemporaryDirectory(prefix=".ort-source-", dir=ort_path.parent) as tmp:
        kept = Path(tmp) / "model.onnx"
        onnx.save_model(proto, str(kept))
        return _serialize(kept, ort_path, optimization)


def keep_shared_passes(changed: list[str]) -> list[Pass]:
    """The rewrites ``to_ort`` makes with ``keep_shared``, in order; each adds the weights it
    rewrote or kept to ``changed``."""
    return [in_place("tables read transposed stored once, transposed", gather_from_transposed, changed.extend),
            in_place("shared weights kept from folding", keep_shared_unfolded, changed.extend)]


def gather_from_transposed(proto) -> list[str]:
    """Store a 2-D table that lookups read as it is and products read transposed (the int8
    word table: the embedding lookup, and the MLM decoder tied to it) once, transposed; returns
    the tables rewritten.

    ``Transpose(W)`` goes (its readers read the stored W^T), and each ``Gather(W, ids)`` becomes
    ``Transpose(Gather(W^T, ids, axis=1))``: the same values, moved at each call in a tensor of
    ids x columns (128 x 128 bytes for ALBERT-base at 128 tokens) instead of the whole table.
    Left to onnxruntime, constant folding stores W^T beside W. Only lookups whose ids are a graph
    input of known rank are rewritten."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = proto.graph
    initializers = {t.name: t for t in graph.initializer}
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in graph.input if v.type.HasField("tensor_type")}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in dict.fromkeys(node.input):
            if name in initializers:
                readers.setdefault(name, []).append(node)
    done = []
    for name, nodes in readers.items():
        tensor = initializers[name]
        transposes = [n for n in nodes if n.op_type == "Transpose" and list(_ints(n, "perm")) == [1, 0]]
        gathers = [n for n in nodes if n.op_type == "Gather" and n.input[0] == name and _int(n, "axis", 0) == 0
                   and n.input[1] in ranks and name not in n.input[1:]]
        if len(tensor.dims) != 2 or name in ranks or not transposes or not gathers \
                or len(transposes) + len(gathers) != len(nodes):
            continue
        flipped = transposes[0].output[0]
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(tensor).T), flipped))
        renames = {t.output[0]: flipped for t in transposes[1:]}
        order = list(graph.node)
        for gather in gathers:
            out, rank = gather.output[0], ranks[gather.input[1]]
            by_column = helper.make_node("Gather", [flipped, gather.input[1]], [f"{out}__by_column"], axis=1,
                                         name=f"{gather.name or out}__by_column")
            back = helper.make_node("Transpose", [by_column.output[0]], [out], perm=[*range(1, rank + 1), 0],
                                    name=f"{gather.name or out}__rows")
            i = next(k for k, n in enumerate(order) if n is gather)
            order[i:i + 1] = [by_column, back]
        order = [n for n in order if not any(n is t for t in transposes)]
        for node in order:
            for i, value in enumerate(node.input):
                if value in renames:
                    node.input[i] = renames[value]
        del graph.node[:]
        graph.node.extend(order)
        i = next(k for k, t in enumerate(graph.initializer) if t.name == name)
        del graph.initializer[i]
        done.append(name)
    if done:
        log.info("stored transposed once, looked up by column: %s", ", ".join(done))
    return done


def _ints(node, name: str) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == name), [])


def _int(node, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


# Nodes whose folding makes a constant the size of their input (a second copy of a weight that
# another node still reads as it is), unlike Shape and Size.
_SMALL_RESULT = ("Shape", "Size")


def keep_shared_unfolded(proto) -> list[str]:
    """Keep onnxruntime's constant folding from storing a weight twice; returns the weights kept.

    A weight read both by a node that folds (every input a constant, such as the Transpose in
    front of the int8 MLM decoder tied to the word embeddings) and by another node (the
    embedding lookup) would be stored twice once folded: the original for the other reader and
    the folded result. Listing the weight as a graph input with a default (an overridable
    initializer) makes it not constant to the optimizers, so that one node stays in the graph
    and runs at each call; the session's inputs are unchanged (onnxruntime lists overridable
    initializers apart). A weight with a single reader is folded as usual: its folded form
    replaces it."""
    from onnx import helper

    graph = proto.graph
    initializers = {t.name: t for t in graph.initializer}
    declared = {v.name for v in graph.input}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in dict.fromkeys(node.input):
            if name in initializers:
                readers.setdefault(name, []).append(node)
    kept = []
    for name, nodes in readers.items():
        folds = [n for n in nodes if n.op_type not in _SMALL_RESULT and all(not i or i in initializers for i in n.input)]
        if folds and len(nodes) > 1 and name not in declared:
            tensor = initializers[name]
            graph.input.append(helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims)))
            kept.append(name)
    if kept:
        log.info("kept from folding into a second copy: %s", ", ".join(kept))
    return kept


def _serialize(onnx_path: Path, ort_path: Path, optimization: str) -> Path:
    import onnxruntime as ort

    from albert_edge.runtime.onnx_engine import DISABLED_OPTIMIZERS

    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[optimization]
    options.optimized_model_filepath = str(ort_path)
    options.add_session_config_entry("session.save_model_format", "ORT")
    options.log_severity_level = 3
    try:
        ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"],
                             disabled_optimizers=[*_LEFT_OUT, *DISABLED_OPTIMIZERS])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ConversionError(f"onnxruntime could not convert {Path(onnx_path).name} to .ort: {first_line(exc)}") from None
    if not ort_path.is_file() or not ort_path.stat().st_size:
        raise ConversionError(f"onnxruntime wrote no {ort_path.name}")
    return ort_path


def write_operator_configs(directory: str | os.PathLike, paths: Sequence[Path] | None = None) -> list[Path]:
    """Write OPERATOR_CONFIGS in ``directory`` (or at ``paths``, one for each, in their order) from
    every .ort in it (onnxruntime's own reader of .ort files makes them); the files are named, not
    their paths, in the comment lines."""
    from onnxruntime.tools.ort_format_model import create_config_from_models

    directory = Path(directory)
    models = sorted(directory.glob("*.ort"))
    paths = list(paths) if paths is not None else [directory / name for name in OPERATOR_CONFIGS.values()]
    chatter = logging.getLogger("ort_format_model.utils")  # says INFO on stderr for each file it writes
    for with_types, path in zip(OPERATOR_CONFIGS, paths):
        level = chatter.level
        chatter.setLevel(logging.WARNING)
        try:
            create_config_from_models(models, path, with_types)
        finally:
            chatter.setLevel(level)
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.startswith("# - "):
                lines[i] = "# - " + Path(line[4:]).name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def read_contents(path: str | os.PathLike) -> GraphContents:
    """What the .ort stores, read back by the device side's reader (as ``inspect`` reads it),
    with what the manifest records of its format."""
    from albert_edge.formats import ort_reader
    from albert_edge.formats.manifest import static_length

    contents = ort_reader.read(path)
    meta = contents.metadata
    # what export() converts at: a static file for the NPU providers at the basic level
    optimization = STATIC_OPTIMIZATION if static_length(path, contents) else OPTIMIZATION
    contents.metadata = {**meta, "format_version": {
        "opset": meta.get("opset"), "ort_format_version": meta.get("ort_format_version"),
        "onnxruntime_version": _onnxruntime_version(), "optimization": optimization,
    }}
    return contents


def _onnxruntime_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def verify_options(model, path: Path, seq_len: int) -> dict[str, Any]:
    """What converters.verify needs besides the file: its contents as the manifest keeps them."""
    return {"contents": read_contents(path)}


# -- the int8 twin ---------------------------------------------------------------------------

def quantized_file(model, parent, path: Path, scheme: str, *, tokenizer=None, seq_len: int = 128,
                   opset: int | None = None, static: bool = False):
    """Write the ``scheme`` twin of the verified fp32 .ort ``parent`` (a
    converters.result.ConvertedFile) at ``path``, beside it: the fp32 .onnx (in ``opset``) is quantized by
    albert_edge.quantize (which checks it and measures it against the fp32 .onnx on held-out
    text, with ``tokenizer``; random ids without one), then converted and checked
    (:func:`ort_twin`). Returns its ConvertedFile."""
    from albert_edge.formats import manifest as manifest_io
    from albert_edge.formats.weights import model_param_bytes
    from albert_edge.quantize import QuantizeConfig, quantize

    from .result import ConvertedFile
    from .twin import verified_onnx

    if static:
        raise ConversionError(f"--scheme {scheme} makes a CPU-only file (its activations are quantized at run time), "
                              "not one for a static file's NPU: quantize the static model.onnx with "
                              "`albert-edge quantize --scheme int8-static`")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".ort-quantize-", dir=path.parent) as scratch:
        scratch = Path(scratch)
        fp32 = verified_onnx(model, scratch, seq_len, tokenizer, opset)
        spiece = getattr(tokenizer, "path", tokenizer)  # an AlbertTokenizer, or the path of its model
        result = quantize(fp32, QuantizeConfig(scheme=scheme, tokenizer=spiece, seq_len=seq_len),
                          scratch / f"model.{scheme}.onnx")
        quantized_entry = manifest_io.read(scratch).file(result.out_path.name)
        t1 = time.perf_counter()
        figures = {**quantized_entry.parity, "parent": parent.name, "parent_sha256": parent.entry.sha256,
                   "measured_on": f"the .onnx pair (model.onnx, model.{scheme}.onnx) this file and its parent were "
                                  "converted from; each .ort gives its .onnx's outputs (fp32: within the verify "
                                  "tolerance of PyTorch; int8: twin_max_abs_diff)"}
        report, entry = ort_twin(result.out_path, path, parent.path, model.config, figures,
                                 param_bytes=model_param_bytes(model))
    entry.precision = scheme
    write_operator_configs(path.parent)
    return ConvertedFile(path.name, path, "ort", t1 - t0, time.perf_counter() - t1, report, entry)


class OrtTwin:
    """The :class:`albert_edge.quantize.Companion` of ``quantize --ort`` (converters.quantized): the .ort twin of
    an int8-dynamic .onnx, made from the checked file before either is put in place
    (:func:`ort_twin`), then the operator configurations of the directory written again."""

    @staticmethod
    def check(recipe) -> None:
        schemes = AT_CONVERSION["ort"]
        if recipe.format != "onnx" or recipe.scheme not in schemes:
            raise ConversionError(f"--ort makes the .ort twin of an {' or '.join(schemes)} .onnx (what ONNX Runtime "
                                  f"Mobile runs), not of {recipe.format} {recipe.scheme.value}")

    @staticmethod
    def target(out: Path) -> Path:
        return out.with_suffix(".ort")

    @staticmethod
    def make(staged_onnx: Path, staged: Path, out: Path, source, recipe, figures: dict[str, Any]):
        measured = {**figures, "measured_on": f"{out.name} against {source.path.name} on held-out text; this file "
                                              "gives the outputs of the .onnx it was converted from (twin_max_abs_diff)"}
        _, entry = ort_twin(staged_onnx, staged, source.path, source.config, measured, name=OrtTwin.target(out).name)
        entry.precision = recipe.scheme.value
        return entry

    @staticmethod
    def after(directory: Path) -> None:
        configs = [directory / name for name in OPERATOR_CONFIGS.values()]
        with staged_files(configs) as tmps:  # a full disk or an interrupt leaves the old files, never half of one
            write_operator_configs(directory, tmps)


def ort_twin(int8_onnx: Path, path: Path, fp32_parent: Path, config, figures: dict[str, Any], *,
             param_bytes: int | None = None, name: str | None = None):
    """Convert the checked int8 .onnx ``int8_onnx`` to the .ort ``path`` and check it: every weight
    of the fp32 ``fp32_parent`` stored once (byte copies and, by value, int8 copies of one fp32
    weight; within ``param_bytes`` when given), and the .onnx's outputs within TWIN_ATOL
    (``config``: the model's AlbertConfig). ``figures`` (the int8 .onnx's, against its parent) are
    kept with the twin's. Returns the report and the manifest entry (named ``name``, default the
    file's); ConversionError when a check fails."""
    from albert_edge.formats import manifest as manifest_io
    from albert_edge.formats.copies import weight_copies
    from albert_edge.formats.weights import analyze, read_file

    from .twin import TwinReport, check_twin

    name = name or path.name
    to_ort(int8_onnx, path)
    twin = _twin_diff(int8_onnx, path, config)
    contents = read_contents(path)
    weights = analyze(contents, param_bytes=param_bytes)
    copies = weight_copies(read_file(fp32_parent), contents)
    check_twin(name, weights, copies, twin, TWIN_ATOL)
    figures = {**figures, "twin_max_abs_diff": twin, "twin_atol": TWIN_ATOL, "weights_checked": len(copies),
               "backend": "onnxruntime", "ok": True}
    report = TwinReport(contents, weights, figures)
    return report, manifest_io.file_entry(path, report, name=name)


def _twin_diff(onnx_path: Path, ort_path: Path, config) -> dict[str, float]:
    """The largest difference of each output between the .onnx and its .ort, both run by
    albert_edge.runtime.Session, on random ids at a few lengths up to 128 (two rows, one padded)."""
    from albert_edge.runtime import Session

    a, b = Session(onnx_path), Session(ort_path)
    rng = np.random.default_rng(0)
    worst: dict[str, float] = {}
    for T in sorted({min(T, config.max_position_embeddings) for T in _TWIN_LENGTHS}):
        ids = rng.integers(0, config.vocab_size, size=(2, T), dtype=np.int64)
        mask = np.ones_like(ids)
        mask[1, T - T // 3:] = 0
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        want, got = a.run(feeds), b.run(feeds)
        for name in want:
            diff = float(np.abs(want[name].astype(np.float64) - got[name].astype(np.float64)).max())
            worst[name] = max(worst.get(name, 0.0), diff)
    return worst
