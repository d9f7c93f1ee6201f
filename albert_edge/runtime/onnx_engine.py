"""How albert_edge.runtime opens an .onnx file in onnxruntime: settings chosen for a small process.

Each setting below lowers the peak RSS (VmHWM) of a fresh process holding an ALBERT-base-shape
int8-dynamic file through calls at 32 and at 128 tokens, against opening the file by path with
onnxruntime's defaults (how albert-edge opened files before, and what
onnxruntime.quantization.quantize_dynamic's file gets); ``python benchmarks/onnx_memory.py FILE``
measures each lead in processes of its own, and its results hold the figures:

- memory pattern off (``enable_mem_pattern``): onnxruntime plans one activation block per
  input shape and keeps each in its arena; off, tensors come from the arena one by one and
  their memory serves every length. Latency unchanged.
- and the weights mapped from the file (:func:`in_place_model`): given a path, onnxruntime
  parses the whole protobuf (a copy of every weight) and copies each weight again into its
  own tensor; given the graph with each large initializer pointing at its own bytes in the
  same file, it maps them, and prepacking reads the mapped pages. Same file, outputs
  identical.
- and the memory freed while loading handed back (:func:`return_freed_memory`).
- a file optimized offline (:func:`albert_edge.quantize.ort_optimize.optimize_for_onnxruntime`,
  marked with :data:`OPTIMIZED_KEY`) is opened with onnxruntime's optimizers off: a graph of
  far fewer nodes, no optimizer work at load.

What is left is onnxruntime's (its code paged in by any CPU session, the packed int8 weights,
the graph and kernels, the activations) and, while loading, the mapped weights beside their
packed copies. Prepacking stays on: without it a call is slower. A mapped file must not be
rewritten in place while a session holds it (albert-edge replaces files by renaming, which
leaves the mapped one intact).
Standard library and numpy only, besides the ``ort`` module handed in; :class:`OnnxBackend` is
what :class:`albert_edge.runtime.Session` runs an .onnx file with.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import json
import logging
import os
from pathlib import Path

import numpy as np

from ..errors import ConfigError, RuntimeUnavailable, first_line, install_line, optional_import
from ..formats.graph import TensorSpec
from . import onnx_text

__all__ = ["OnnxBackend", "PROVIDERS", "ORT_TYPES", "ort_providers", "OPTIMIZED_KEY", "DISABLED_OPTIMIZERS", "IN_PLACE_MIN_BYTES", "read_metadata", "operator_domains", "file_takes_text", "optimized_by",
           "in_place_model", "inference_session", "return_freed_memory", "session_options"]

log = logging.getLogger(__name__)

# onnxruntime execution providers by short name. CPU is the default; the others run only where the
# installed onnxruntime build has them (onnxruntime-gpu on a Jetson or a CUDA machine).
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
             "tensorrt": "TensorrtExecutionProvider"}

# onnxruntime's type names -> numpy dtype names.
ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(bool)": "bool",
    "tensor(string)": "object",  # the text of an onnx-text file: numpy holds Python strings as objects
}

# metadata_props key of a file whose graph onnxruntime has already optimized for the CPU
# execution provider; its value is the onnxruntime version that did it.
OPTIMIZED_KEY = "albert_edge.onnxruntime_optimized"

# onnxruntime's fused SkipLayerNormalization kernel took 0.28 ms per ALBERT-base layer where the
# Add + LayerNormalization it replaces take 0.08 ms (onnxruntime 1.31, x86, 2 threads, int8 and
# fp32 files alike), so that one fusion is left out.
DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]

# Field numbers of onnx.proto (ModelProto, GraphProto, TensorProto, StringStringEntryProto) and
# protobuf wire types.
_GRAPH, _OPSET_IMPORT, _METADATA_PROPS = 7, 8, 14
_INITIALIZER = 5
_RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION, _EXTERNAL = 9, 13, 14, 1
_KEY, _VALUE = 1, 2
_DOMAIN = 1  # OperatorSetIdProto
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_MAX_ENTRY = 1 << 20  # a metadata entry longer than this is not one we wrote

# Initializers this large or larger are mapped from the file (in_place_model); smaller ones
# (shapes, axes, scalars) stay in the graph, where a separate mapping would cost more than them.
IN_PLACE_MIN_BYTES = 4096
# Where onnxruntime looks for external data of a model given as bytes (it has no path then).
_FOLDER_KEY = "session.model_external_initializers_file_folder_path"


class _NotProtobuf(Exception):
    pass


def _varint(read) -> int:
    value, shift = 0, 0
    while True:
        byte = read(1)
        if not byte or shift > 63:
            raise _NotProtobuf
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
        shift += 7


def _fields(f, end: int):
    """(field number, wire type, where its key starts, where its payload starts, payload size)
    of each field up to ``end``, the file at the payload; it is put after the field when the
    next one is asked for."""
    while f.tell() < end:
        head = f.tell()
        key = _varint(f.read)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            start = f.tell()
            _varint(f.read)
            size = f.tell() - start
            f.seek(start)
        elif wire in (_FIXED64, _FIXED32):
            start, size = f.tell(), 8 if wire == _FIXED64 else 4
        elif wire == _LENGTH:
            size = _varint(f.read)
            start = f.tell()
        else:
            raise _NotProtobuf
        if number == 0 or start + size > end:
            raise _NotProtobuf
        yield number, wire, head, start, size
        f.seek(start + size)


def _span(f, begin: int, end: int) -> bytes:
    f.seek(begin)
    data = f.read(end - begin)
    if len(data) != end - begin:
        raise _NotProtobuf
    return data


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _length_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | _LENGTH) + _encode_varint(len(payload)) + payload


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """``metadata_props`` of an .onnx file, read from its top-level fields only: the graph (nearly
    all of the file) is skipped over, so this costs a few small reads, whatever the file's size.
    ``{}`` for a file that is not a well-formed protobuf; onnxruntime says what is wrong with it."""
    out: dict[str, str] = {}
    try:
        with open(path, "rb") as f:
            end = os.fstat(f.fileno()).st_size
            for number, wire, _, start, size in _fields(f, end):
                if number != _METADATA_PROPS or wire != _LENGTH or size > _MAX_ENTRY:
                    continue
                entry = {n: f.read(s) for n, w, _, _, s in _fields(f, start + size) if w == _LENGTH}
                if _KEY in entry:
                    out[entry[_KEY].decode("utf-8", "replace")] = entry.get(_VALUE, b"").decode("utf-8", "replace")
    except (OSError, _NotProtobuf):
        return {}
    return out


def operator_domains(path: str | os.PathLike) -> set[str]:
    """The operator domains the .onnx file imports ("" is ONNX's own), read from its top-level
    fields only, like :func:`read_metadata`. Empty for a file that is not a well-formed protobuf."""
    out: set[str] = set()
    try:
        with open(path, "rb") as f:
            for number, wire, _, start, size in _fields(f, os.fstat(f.fileno()).st_size):
                if number != _OPSET_IMPORT or wire != _LENGTH or size > _MAX_ENTRY:
                    continue
                entry = {n: f.read(s) for n, w, _, _, s in _fields(f, start + size) if w == _LENGTH}
                out.add(entry.get(_DOMAIN, b"").decode("utf-8", "replace"))
    except (OSError, _NotProtobuf):
        return set()
    return out


def file_takes_text(path: str | os.PathLike) -> bool:
    """Whether the .onnx file's input is the text (``convert --to onnx-text``): it imports
    onnxruntime-extensions' operator domain, whose tokenizer node turns the text into ids."""
    return onnx_text.DOMAIN in operator_domains(path)


def optimized_by(path: str | os.PathLike) -> str | None:
    """The onnxruntime version that optimized the file's graph offline, None when it was not."""
    return read_metadata(path).get(OPTIMIZED_KEY)


def in_place_model(path: str | os.PathLike, min_bytes: int = IN_PLACE_MIN_BYTES) -> bytes | None:
    """The .onnx file's bytes with each initializer of ``min_bytes`` or more turned into an
    external-data reference to its own bytes in that same file (location: the file's name,
    offset and length of its raw_data). onnxruntime then maps the weights from the file instead
    of parsing a copy of them and copying that again. Only the graph's structure is read (a few
    hundred KiB for ALBERT-base); the weights are skipped over. None when there is nothing to
    move (no large raw_data initializer) or the file is not a well-formed ONNX protobuf."""
    path = Path(path)
    try:
        location = path.name.encode("utf-8")
    except UnicodeEncodeError:  # a name the file system gave us undecoded; load by path
        return None
    moved = 0

    def tensor(f, head: int, start: int, size: int) -> bytes:
        nonlocal moved
        kept, raw = [], None
        for number, _, field_head, field_start, field_size in _fields(f, start + size):
            external = number == _EXTERNAL_DATA or (number == _DATA_LOCATION and _varint(f.read) == _EXTERNAL)
            if external:
                return _span(f, head, start + size)  # external already: its location is the model's folder
            if number == _DATA_LOCATION:
                continue  # DEFAULT, written out again below when the data moves
            if number == _RAW_DATA:
                raw = (field_start, field_size)
            else:
                kept.append(_span(f, field_head, field_start + field_size))
        if raw is None or raw[1] < min_bytes:
            return _span(f, head, start + size)
        moved += 1
        refs = b"".join(_length_field(_EXTERNAL_DATA, _length_field(_KEY, key) + _length_field(_VALUE, value))
                        for key, value in ((b"location", location), (b"offset", str(raw[0]).encode()),
                                           (b"length", str(raw[1]).encode())))
        return _length_field(_INITIALIZER, b"".join(kept) + refs + _encode_varint(_DATA_LOCATION << 3) + b"\x01")

    try:
        with open(path, "rb") as f:
            out = bytearray()
            for number, wire, head, start, size in _fields(f, os.fstat(f.fileno()).st_size):
                if number != _GRAPH or wire != _LENGTH:
                    out += _span(f, head, start + size)
                    continue
                graph = bytearray()
                for field, field_wire, field_head, field_start, field_size in _fields(f, start + size):
                    if field == _INITIALIZER and field_wire == _LENGTH:
                        graph += tensor(f, field_head, field_start, field_size)
                    else:
                        graph += _span(f, field_head, field_start + field_size)
                out += _length_field(_GRAPH, bytes(graph))
    except (OSError, _NotProtobuf):
        return None
    return bytes(out) if moved else None


def inference_session(ort, path: str | os.PathLike, options, providers: list[str]):
    """``ort.InferenceSession`` of ``path``, its weights mapped from the file where
    :func:`in_place_model` can arrange it (an onnxruntime too old for the folder setting, or a
    file it cannot read that way, is loaded by its path as usual)."""
    path = Path(path)
    session = None
    data = None if _other_file_in_cwd(path) else in_place_model(path)
    if data is not None:
        options.add_session_config_entry(_FOLDER_KEY, str(path.resolve().parent))
        try:
            session = ort.InferenceSession(data, options, providers=providers, disabled_optimizers=DISABLED_OPTIMIZERS)
        except Exception as exc:  # onnxruntime raises its own exception types
            log.debug("%s: loading with the weights in place failed (%s); loading by path", path,
                      str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        del data
    if session is None:
        session = ort.InferenceSession(str(path), options, providers=providers, disabled_optimizers=DISABLED_OPTIMIZERS)
    return_freed_memory()
    return session


def _other_file_in_cwd(path: Path) -> bool:
    """Whether a different file of ``path``'s name is in the working directory: an onnxruntime
    that predates the folder setting (it ignores settings it does not know) looks for the
    weights there, and would take that file's bytes for them."""
    here = Path.cwd() / path.name
    try:
        return here.exists() and not here.samefile(path)
    except OSError:
        return True


def return_freed_memory(libc=None) -> bool:
    """Hand the heap memory freed while loading (the parsed graph, optimizer and packing scratch)
    back to the system: glibc keeps freed memory for later allocations, and the activations at
    the first calls then come on top of it: the process peaks lower (benchmarks/onnx_memory.py).
    glibc's ``malloc_trim``; False where the C library has none (musl, macOS, Windows)."""
    try:
        trim = (libc or ctypes.CDLL(None)).malloc_trim
    except (OSError, AttributeError, TypeError):
        return False
    trim(0)
    return True


def session_options(ort, path: str | os.PathLike, num_threads: int | None = None, provider: str | None = None,
                    ops_trace: str | os.PathLike | None = None):
    """The ``ort.SessionOptions`` albert_edge.runtime opens ``path`` with (see the module's notes)."""
    options = ort.SessionOptions()
    cpu_only = provider is None or provider in ("cpu", "CPUExecutionProvider")
    done = cpu_only and optimized_by(Path(path)) is not None  # other providers optimize for their own kernels
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL if done
                                        else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    options.enable_mem_pattern = False
    options.log_severity_level = 3
    if num_threads:
        options.intra_op_num_threads = int(num_threads)
        options.inter_op_num_threads = 1
    if ops_trace is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(ops_trace)
    return options


def app_session_options(ort, num_threads: int | None = None, ops_trace: str | os.PathLike | None = None):
    """``ort.SessionOptions`` as an app sets them: onnxruntime's defaults (all optimizers, memory
    pattern on), the thread count the only setting."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if num_threads:
        options.intra_op_num_threads = int(num_threads)
    if ops_trace is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(ops_trace)
    return options


class OnnxBackend:
    """An .onnx file in onnxruntime, opened with :func:`session_options` and :func:`inference_session`;
    with ``app_defaults``, by path with :func:`app_session_options`, as an app opens it."""

    name = "onnxruntime"

    def __init__(self, path: Path, num_threads: int | None, provider: str | None = None,
                 ops_trace: str | os.PathLike | None = None, app_defaults: bool = False):
        try:
            ort = optional_import("onnxruntime")
        except ImportError:
            raise RuntimeUnavailable(
                f"running .onnx files needs onnxruntime ({install_line('onnx')})"
            ) from None
        options = (app_session_options(ort, num_threads, ops_trace) if app_defaults
                   else session_options(ort, path, num_threads, provider, ops_trace))
        if file_takes_text(path):  # its tokenizer is an extensions node
            options.register_custom_ops_library(onnx_text.extensions_library())
        providers = ort_providers(provider, ort.get_available_providers())
        self._profiling = ops_trace is not None
        announced = io.StringIO()
        try:
            # A load that fails with ValueError or RuntimeError is retried on the fallback provider,
            # and onnxruntime announces it with print(): stdout is for results (--json).
            with contextlib.redirect_stdout(announced):
                self._session = (ort.InferenceSession(str(path), options, providers=providers) if app_defaults
                                 else inference_session(ort, path, options, providers))
        except Exception as exc:  # onnxruntime raises its own exception types
            raise RuntimeUnavailable(f"{path}: onnxruntime cannot load it: {first_line(exc)}") from None
        finally:
            if announced.getvalue():
                log.debug("onnxruntime said while loading %s: %s", path, announced.getvalue().strip())
        self.accelerator = self._session.get_providers()[0]
        if self.accelerator != providers[0]:  # onnxruntime falls back quietly when a provider's libraries fail
            raise RuntimeUnavailable(f"{path}: onnxruntime could not start {providers[0]} (its session runs on "
                                     f"{self.accelerator}): check that the CUDA, cuDNN and TensorRT libraries "
                                     "this onnxruntime build needs are installed and found")
        self.inputs = [_ort_spec(a) for a in self._session.get_inputs()]
        self.outputs = [_ort_spec(a) for a in self._session.get_outputs()]
        self._setting: dict[str, np.ndarray] = {}

    def set_exit_setting(self, value: float) -> float:
        """An adaptive file's (convert --adaptive) exit setting from the next run on: fed to its
        optional input, once checked against the rule its metadata records (ValueError)."""
        from ..exits import RULE_METADATA, SETTING, ExitRule

        recorded = self._session.get_modelmeta().custom_metadata_map.get(RULE_METADATA)
        if recorded is None:
            raise ValueError("it is not adaptive (convert --adaptive): it has no exit setting")
        rule = json.loads(recorded)
        try:
            ExitRule(rule["kind"], float(value), int(rule["min_passes"])).check(int(rule["passes"]))
        except ConfigError as exc:
            raise ValueError(f"exit setting {value:g} is outside the range of its exit rule: {exc}") from None
        self._setting = {SETTING: np.array(value, np.float32)}
        return float(np.float32(value))

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [s.name for s in self.outputs]
        return dict(zip(names, self._session.run(names, {**feeds, **self._setting})))

    def end_profiling(self) -> Path | None:
        if not self._profiling:
            return None
        self._profiling = False
        return Path(self._session.end_profiling())


def ort_providers(provider: str | None, available: list[str]) -> list[str]:
    """The provider list for onnxruntime: the one asked for, then CPU for the nodes it cannot run;
    TensorRT is followed by CUDA where the build has it (onnxruntime's advice: what TensorRT does not
    take runs on the GPU, not the CPU)."""
    if provider is None:
        return ["CPUExecutionProvider"]
    full = PROVIDERS.get(provider.lower(), provider)
    if full not in PROVIDERS.values():
        raise RuntimeUnavailable(f"unknown execution provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    if full not in available:
        raise RuntimeUnavailable(f"execution provider {full} is not in this onnxruntime build (available: "
                                 f"{', '.join(available)}); install onnxruntime-gpu with CUDA/TensorRT for it")
    cuda = PROVIDERS["cuda"]
    then = [cuda] if full == PROVIDERS["tensorrt"] and cuda in available else []
    return list(dict.fromkeys([full, *then, "CPUExecutionProvider"]))


def _ort_spec(arg) -> TensorSpec:
    shape = tuple(d if isinstance(d, (int, str)) else -1 for d in (arg.shape or ()))
    return TensorSpec(name=arg.name, dtype=ORT_TYPES.get(arg.type, arg.type), shape=shape)
