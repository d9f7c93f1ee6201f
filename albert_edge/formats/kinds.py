"""The kinds of model file the device side reads: one typed :class:`Format` entry each.

An entry knows what callers used to work out from the format's name: its suffixes and the
identifier its first bytes carry (:mod:`.identifiers`), its readers (imported when a file is
read: the ONNX ones need ``onnx``, which the device side does not import until then), the
engines that run it in order of preference, and what it can run on. Callers look a file up once
(:func:`of_file`, or :func:`by_name` for the name a record or a manifest holds) and ask the
entry, rather than compare the format's name with a string.

Four entries: ``onnx``, ``ort``, ``tflite``, ``executorch``. Their names are the ``format`` that
profile records, manifest entries, ``inspect --json`` and ``info`` write, and do not change.

MediaPipe files, onnx-text files and transformers.js folders are :class:`Variant` s, not entries:

- each is read, checked and run exactly as its container is (a MediaPipe file is a .tflite whose
  metadata packs a text task's tokenizer; an onnx-text file an .onnx whose first node is a
  tokenizer from onnxruntime-extensions; a transformers.js folder holds .onnx files), by the same
  readers and the same engines, and its record and manifest entry say ``tflite`` / ``onnx``;
- its suffix does not make it one: a MediaPipe file renamed ``model.tflite`` is still one, and a
  plain ``model.mediapipe.tflite`` is not. What makes it one is its content, asked where it
  matters (:func:`.tflite_metadata.read_metadata` for a text task, the runtime's
  ``file_takes_text`` for a text input), never its name.

As entries of their own they would repeat their container's readers, engines and facts, carry a
second name beside the one their records must keep, and be found by a suffix that does not decide
what they are. So a variant names the format it is and the suffix ``convert`` gives it, and
:func:`by_name` takes a variant's name too (the demo's ``mediapipe`` model) and gives its format;
the entry says whether its files may be one (``may_take_text``, ``may_carry_task``), and the file
is asked.

Imports nothing at import time beyond :mod:`.graph`'s numpy; each reader, check and engine
module is imported when it is used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import RuntimeUnavailable
from . import identifiers
from .graph import GraphContents
from .identifiers import Identifier

if TYPE_CHECKING:
    from .products import Products

__all__ = ["Engine", "Format", "Variant", "ONNX", "ORT", "TFLITE", "EXECUTORCH", "ALL", "VARIANTS",
           "find", "of_file", "by_name", "file_suffix", "suffixes"]


@dataclass(frozen=True)
class Engine:
    """One interpreter of a format: where it is imported from and how pip names it."""

    module: str  # where its API is: "ai_edge_litert.interpreter"
    attribute: str | None  # the interpreter class there ("Interpreter"); None when the module is the API
    distributions: tuple[str, ...]  # pip's names for it, the usual one first

    @property
    def package(self) -> str:
        """The top-level package: what a profile record names as its runtime."""
        return self.module.split(".")[0]


@dataclass(frozen=True)
class Format:
    """One kind of model file and what the device side can do with it."""

    name: str  # what records, manifests and `inspect --json` call it: "tflite"
    suffixes: tuple[str, ...]  # lower case, the one convert writes first
    identifier: Identifier  # what its first bytes carry
    # What it holds (inputs, outputs, ops, stored tensors): what inspect and weights-once read.
    reader: Callable[[Path], GraphContents]
    # The matrix products that read a stored weight (float_weights); None where they are not
    # analysed in this format.
    weights_reader: Callable[[Path], Products] | None
    # The check of its structure before an interpreter sees it (one line, not a crash); None: none.
    structure_check: Callable[[Path], None] | None
    engines: tuple[Engine, ...]  # in order of preference: the first one installed runs the file
    # Runs in onnxruntime: it takes execution providers (not delegates), per-operator tracing,
    # and onnxruntime-web / -node run it in a browser and in Node.
    onnxruntime: bool
    gpu: bool  # accelerator "gpu" runs it: LiteRT's GPU accelerator, or onnxruntime's CUDA provider
    gpu_placement: bool  # the GPU accelerator says where each operator went (LiteRT's; static files only)
    nnapi_coreml: bool  # onnxruntime's NNAPI and Core ML providers run it
    partitions_checked: bool  # onnxruntime's mobile checker reads the file itself (an .ort's is its .onnx's)
    static_shapes: bool  # may be static-shape ([1, N] inputs); a .pte declares upper bounds instead
    # Fixed inputs may still hide tensors sized at run time (a MediaPipe task file): the question
    # to ask of a file; None where fixed inputs fix the graph.
    sized_at_run_time: Callable[[Path], bool] | None
    op_versions: bool  # each operator has a version, and the first runtime release that loads it
    min_runtime_key: str | None  # the metadata key of the oldest runtime that loads the file
    version_key: str  # what the manifest's format_version holds: "opset" or "schema_version"
    stores_quantization: bool  # int8 tensors carry their scales: read through the object model
    small_weights_float: bool  # its converter keeps weights under TFLITE_MIN_QUANTIZED in float
    # Why the float-product analysis is not made on this format (its weight bytes by dtype are
    # listed instead); None where it is made.
    precision_note: str | None
    cpu_kernels: str = "the runtime's CPU kernels"  # what computes it on a CPU: "XNNPACK", "MLAS"
    # A file of it may take the text itself, its tokenizer a node (onnx-text): ask the runtime's
    # file_takes_text of the file.
    may_take_text: bool = False
    # A file of it may carry a text task for MediaPipe Tasks in its metadata, its tokenizer and
    # labels packed (mediapipe): ask tflite_metadata.read_metadata of the file.
    may_carry_task: bool = False

    @property
    def suffix(self) -> str:
        """The suffix ``convert`` writes: ".tflite"."""
        return self.suffixes[0]

    @property
    def takes_delegates(self) -> bool:
        """Its engine is set up by delegate ("xnnpack", "none"), not by execution provider."""
        return not self.onnxruntime

    @property
    def browser(self) -> bool:
        """onnxruntime-web and onnxruntime-node run it (profile --runtime web / node)."""
        return self.onnxruntime

    @property
    def packages(self) -> tuple[str, ...]:
        """The top-level packages that can run it, in order of preference."""
        return tuple(engine.package for engine in self.engines)

    def identifies(self, head: bytes | bytearray | memoryview) -> bool:
        """Whether ``head`` (a file's first bytes, or all of them) carries this format's identifier."""
        return self.identifier.found(head)

    def check_identifier(self, path: str | os.PathLike) -> None:
        """RuntimeUnavailable in one line when the file at ``path`` is not of this format:
        "model.tflite: not a TFLite model (no TFL3 identifier)", "...: not an ONNX model",
        "...: not an ONNX Runtime .ort model (no ORTM identifier)", "...: not an ExecuTorch
        program (no ET12 identifier)"."""
        self.identifier.check(path)

    def read(self, path: str | os.PathLike) -> GraphContents:
        """What the file at ``path`` holds, read by this format's reader (ValueError when damaged)."""
        return self.reader(Path(path))


@dataclass(frozen=True)
class Variant:
    """A file ``convert`` writes in another entry's format, found by its content (see the module's
    docstring): MediaPipe's .tflite, onnx-text's .onnx, a transformers.js folder's .onnx."""

    name: str  # the target's name: "mediapipe"
    format: Format  # what it is read and run as
    suffix: str  # what convert writes: ".mediapipe.tflite"


# -- the readers, each imported when a file of its format is read ---------------------------------

def _read_onnx(path: Path) -> GraphContents:
    from .onnx_reader import read

    return read(path)


def _read_ort(path: Path) -> GraphContents:
    from .ort_reader import read

    return read(path)


def _read_tflite(path: Path) -> GraphContents:
    from .tflite_reader import read

    return read(path)


def _read_pte(path: Path) -> GraphContents:
    from .pte_reader import read

    return read(path)


def _onnx_products(path: Path) -> Products:
    from .products import onnx_products

    return onnx_products(path)


def _tflite_products(path: Path) -> Products:
    from .products import tflite_products

    return tflite_products(path)


def _check_ort(path: Path) -> None:
    from .ort_reader import check_ort

    check_ort(path)


def _check_tflite(path: Path) -> None:
    from .tflite_check import check_tflite

    check_tflite(path)


def _tflite_sized_at_run_time(path: Path) -> bool:
    from .tflite_reader import has_dynamic_tensor

    return has_dynamic_tensor(path)


# -- the table ----------------------------------------------------------------------------------

_ONNXRUNTIME = (Engine("onnxruntime", None, ("onnxruntime", "onnxruntime-gpu")),)

ONNX = Format(
    name="onnx", suffixes=(".onnx",), identifier=identifiers.ONNX,
    reader=_read_onnx, weights_reader=_onnx_products, structure_check=None, engines=_ONNXRUNTIME,
    onnxruntime=True, gpu=True, gpu_placement=False, nnapi_coreml=True, partitions_checked=True,
    static_shapes=True, sized_at_run_time=None, op_versions=False, min_runtime_key=None, version_key="opset",
    stores_quantization=False, small_weights_float=False, precision_note=None, cpu_kernels="MLAS",
    may_take_text=True,
)

# ONNX Runtime's own format: what ONNX Runtime Mobile loads, and any onnxruntime build runs.
ORT = Format(
    name="ort", suffixes=(".ort",), identifier=identifiers.ORT,
    reader=_read_ort, weights_reader=None, structure_check=_check_ort, engines=_ONNXRUNTIME,
    onnxruntime=True, gpu=True, gpu_placement=False, nnapi_coreml=True, partitions_checked=False,
    static_shapes=True, sized_at_run_time=None, op_versions=False, min_runtime_key="min_onnxruntime",
    version_key="schema_version", stores_quantization=False, small_weights_float=False,
    # The .ort's graph is onnxruntime's optimized one (fused operators).
    precision_note="which matrix products read float weights is analysed in the .onnx file an .ort was "
                   "converted from; its weight bytes by dtype are listed",
    cpu_kernels="MLAS",
)

TFLITE = Format(
    name="tflite", suffixes=(".tflite",), identifier=identifiers.TFLITE,
    reader=_read_tflite, weights_reader=_tflite_products, structure_check=_check_tflite,
    engines=(
        Engine("ai_edge_litert.interpreter", "Interpreter", ("ai-edge-litert",)),
        Engine("tflite_runtime.interpreter", "Interpreter", ("tflite-runtime",)),
        # imports all of tensorflow: the workstation fallback
        Engine("tensorflow.lite", "Interpreter", ("tensorflow", "tensorflow-cpu")),
    ),
    onnxruntime=False, gpu=True, gpu_placement=True, nnapi_coreml=False, partitions_checked=False,
    static_shapes=True, sized_at_run_time=_tflite_sized_at_run_time, op_versions=True, min_runtime_key=None,
    version_key="schema_version", stores_quantization=True, small_weights_float=True, precision_note=None,
    cpu_kernels="XNNPACK", may_carry_task=True,
)

EXECUTORCH = Format(
    name="executorch", suffixes=(".pte",), identifier=identifiers.EXECUTORCH,
    reader=_read_pte, weights_reader=None, structure_check=None,
    engines=(
        # numpy in and out, no torch (albert_edge.runtime.pte_engine)
        Engine("executorch_numpy_runtime", "Runtime", ("executorch-numpy-runtime",)),
        # executorch's own bindings take torch tensors only, so they import torch: the workstation fallback
        Engine("executorch.extension.pybindings._C", None, ("executorch",)),
    ),
    onnxruntime=False, gpu=False, gpu_placement=False, nnapi_coreml=False, partitions_checked=False,
    static_shapes=False, sized_at_run_time=None, op_versions=False, min_runtime_key=None,
    version_key="schema_version", stores_quantization=False, small_weights_float=False,
    # Its weights by dtype, delegates and segments come from its reader.
    precision_note="which matrix products read float weights is analysed in .onnx and .tflite files; a .pte's "
                   "weight bytes by dtype are listed with its delegates",
    cpu_kernels="XNNPACK",
)

# In the order messages list their suffixes: ".onnx, .tflite, .pte, .ort".
ALL: tuple[Format, ...] = (ONNX, TFLITE, EXECUTORCH, ORT)

VARIANTS: tuple[Variant, ...] = (
    Variant("mediapipe", TFLITE, ".mediapipe.tflite"),
    Variant("onnx-text", ONNX, ".text.onnx"),
    Variant("transformers-js", ONNX, ".transformers-js.onnx"),
)

_BY_SUFFIX = {suffix: f for f in ALL for suffix in f.suffixes}
_BY_NAME = {f.name: f for f in ALL}
_VARIANT_BY_NAME = {v.name: v for v in VARIANTS}


def suffixes() -> tuple[str, ...]:
    """Every model-file suffix the device side reads, in the order messages list them."""
    return tuple(_BY_SUFFIX)


def find(path: str | os.PathLike) -> Format | None:
    """The format of the file at ``path`` by its suffix (any case), None when it is no model file."""
    return _BY_SUFFIX.get(Path(path).suffix.lower())


def of_file(path: str | os.PathLike) -> Format:
    """The format of the file at ``path`` by its suffix (any case); RuntimeUnavailable, one line
    listing the suffixes, for anything else. Reads nothing: ask ``check_identifier`` for that."""
    found = find(path)
    if found is None:
        suffix = Path(path).suffix.lower()
        raise RuntimeUnavailable(
            f"{path}: unknown model file type {suffix or '(no suffix)'!r}; expected {', '.join(_BY_SUFFIX)}"
        )
    return found


def by_name(name: str) -> Format:
    """The format called ``name`` (a record's or a manifest's ``format``), or the format a
    variant called ``name`` is ("mediapipe" is a TFLite file); KeyError, naming them, for another."""
    found = _BY_NAME.get(name)
    if found is None:
        variant = _VARIANT_BY_NAME.get(name)
        if variant is None:
            raise KeyError(f"unknown model format {name!r}; expected one of "
                           f"{', '.join([*_BY_NAME, *_VARIANT_BY_NAME])}")
        found = variant.format
    return found


def file_suffix(name: str) -> str:
    """The suffix ``convert`` gives a file of the format or variant called ``name``:
    ".tflite" for "tflite", ".mediapipe.tflite" for "mediapipe"."""
    variant = _VARIANT_BY_NAME.get(name)
    return variant.suffix if variant is not None else by_name(name).suffix
