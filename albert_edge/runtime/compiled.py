"""Shared weights packed once in memory, not only stored once in the file.

XNNPACK packs every weight a fully-connected node reads into its own layout, once per node. An
ALBERT file stores each shared weight once, but its L layers reach it through L nodes, so the
classic TFLite ``Interpreter`` (XNNPACK on by default) holds L packed copies: its peak memory
grows with every layer that shares a weight. XNNPACK's weight cache keys each packed weight by
the file buffer it came from, so nodes that share a buffer share one packed copy. The classic
``Interpreter`` of ai-edge-litert offers no way to turn the cache on; LiteRT's CompiledModel
does, with the in-memory cache (no file to manage): the same outputs bit for bit, at the same
speed.

``CompiledTFLite`` runs CompiledModel through the C API of the ``libLiteRt.so`` that
ai-edge-litert ships, with ctypes, rather than through ai-edge-litert's Python wrapper, whose
modules and ``libpywrap_litert_common.so`` take memory of their own (the wrapper's environment
also loads the WebGPU accelerator for a CPU run). The CPU options are LiteRT's TOML payload for the
"xnnpack" identifier (``num_threads``, ``weight_cache_file_path``); the environment registers
the CPU accelerator only (``kLiteRtEnvOptionTagAutoRegisterAccelerators``: no NPU or GPU
discovery); the signature is read with albert-edge's own flatbuffer reader over an mmap, not
ai-edge-litert's generated schema, which would add memory too. The profiler
(``profile.tflite_ops``) uses the same class.

This route has a smaller peak memory than the same CompiledModel through the Python wrapper, and
far smaller than the classic Interpreter's, with the same outputs bit for bit and about the
wrapper's latency at every length: ``python benchmarks/memory.py model.int8.tflite model.tflite
--routes session tflite-wrapper tflite-interpreter --seq-lens 16 32 128`` measures the routes, and
its results hold the figures and where the process's memory goes (Python and numpy, the imports,
libLiteRt.so's pages, the pages of the file that LiteRT's model loading touches whatever the
madvise, the weight cache, runtime structures, activations). glibc's malloc settings
(``M_MMAP_THRESHOLD``; ``MALLOC_ARENA_MAX=1``) change it too little for a process-wide setting.

Device side: numpy and ai-edge-litert's ``libLiteRt.so`` only.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import functools
import importlib.util
import logging
import mmap
import os
import platform
import struct
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ..formats.graph import TensorSpec
from ..formats.kinds import TFLITE
from ..errors import RuntimeUnavailable

__all__ = ["CompiledTFLite", "WEIGHT_CACHE", "available", "unavailable_reason", "cpu_runs_compiled_model",
           "library_path", "read_signature", "output_shape"]

log = logging.getLogger(__name__)

# XNNPACK's name for a weight cache that lives in anonymous memory rather than a file.
WEIGHT_CACHE = ":memory"
# What XNNPACK names the memfd that holds that cache (ai-edge-litert 2.3), as /proc/self/maps shows it.
_CACHE_MAPPING = "XNNPack in-memory weight cache"
_SIGNATURE = "serving_default"
_LIBRARY = "libLiteRt.so"
# LiteRT's host-memory tensor buffers must start on this boundary, or it copies them.
_ALIGN = 64
_DTYPES = {"FLOAT32": "float32", "FLOAT16": "float16", "INT32": "int32", "INT64": "int64",
           "INT8": "int8", "UINT8": "uint8", "INT16": "int16", "BOOL": "bool"}
# LiteRtElementType (litert/c/litert_model_types.h): TFLite's TensorType numbering plus one.
_ELEMENT_TYPES = {"float32": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int16": 7, "int8": 9, "float16": 10}
_CPU = 1  # kLiteRtHwAcceleratorCpu
_AUTO_REGISTER_ACCELERATORS = 24  # kLiteRtEnvOptionTagAutoRegisterAccelerators (litert_environment_options.h)
_ANY_INT = 2  # kLiteRtAnyTypeInt
_STATUS = {1: "invalid argument", 2: "memory allocation failure", 3: "runtime failure", 4: "missing input tensor",
           5: "unsupported", 6: "not found", 8: "wrong version", 500: "file I/O error", 501: "invalid flatbuffer",
           502: "dynamic loading failed", 504: "compilation failed", 1000: "index out of range"}


# On 64-bit Arm, LiteRT's CompiledModel (ai-edge-litert 2.3, aarch64 wheel) dies with SIGILL
# while loading a model on a Cortex-A72 (Raspberry Pi 4) and a Cortex-A53 (Pi 3), both ARMv8.0,
# and loads on a Cortex-A76 (Pi 5) (qemu-aarch64 -cpu each; the classic Interpreter runs on all
# three). SIGILL is a signal no Python code can catch, so on Arm the route is taken only on CPUs
# with the ARMv8.2 half-precision and dot-product extensions the A76 has; elsewhere the
# Interpreter runs the file, packing shared weights per layer.
_ARM_FEATURES = frozenset({"asimdhp", "asimddp"})


def cpu_runs_compiled_model(machine: str | None = None, cpuinfo: str | None = None) -> bool:
    """Whether this CPU (``platform.machine()``, /proc/cpuinfo) is one LiteRT's CompiledModel runs on."""
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64"):
        return True
    if machine not in ("aarch64", "arm64"):
        return False
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return False
    features = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "features":
            features.update(value.split())
    return _ARM_FEATURES <= features


def library_path() -> Path | None:
    """LiteRT's runtime library inside the installed ai-edge-litert, found without importing the
    package (its Python wrappers take memory this route does not use); None when absent."""
    try:
        spec = importlib.util.find_spec("ai_edge_litert")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / _LIBRARY
        if path.is_file():
            return path
    return None


# The ctypes structures of this module follow LiteRT's C headers as these ai-edge-litert releases
# ship them; a release whose layouts were not checked against them is left to the classic
# Interpreter rather than driven through structures that may have moved.
CHECKED_RELEASES = ("2.3.",)


def installed_release(library: Path) -> str | None:
    """The installed ai-edge-litert's version, from its dist-info folder beside the package
    (importlib.metadata would add to this process's memory)."""
    for info in sorted(library.parent.parent.glob("ai_edge_litert-*.dist-info")):
        return info.name[len("ai_edge_litert-"):-len(".dist-info")]
    return None


def available() -> bool:
    """Whether LiteRT's CompiledModel (libLiteRt.so of a checked ai-edge-litert release) is
    installed and runs on this CPU."""
    reason = unavailable_reason()
    if reason is not None:
        log.info("LiteRT's CompiledModel route is not taken: %s", reason)
    return reason is None


def unavailable_reason(machine: str | None = None, cpuinfo: str | None = None) -> str | None:
    """Why LiteRT's CompiledModel cannot run here, or None when it can. The CPU comes first: no
    package install changes it (a Raspberry Pi 4 with ai-edge-litert 2.3 installed lacks the CPU,
    not the package)."""
    if not cpu_runs_compiled_model(machine, cpuinfo):
        machine = (machine or platform.machine()).lower()
        if machine in ("aarch64", "arm64"):
            return ("this CPU lacks the ARMv8.2 fp16 and dot-product extensions (asimdhp, asimddp) that "
                    "LiteRT's CompiledModel needs: it dies with SIGILL on ARMv8.0 CPUs such as the "
                    "Raspberry Pi 4's Cortex-A72")
        return f"LiteRT's CompiledModel runs on x86-64 and 64-bit Arm CPUs, and this one is {machine or 'unknown'}"
    library = library_path()
    if library is None:
        return "ai-edge-litert is not installed (LiteRT's libLiteRt.so comes with it)"
    release = installed_release(library)
    if release is None or not release.startswith(CHECKED_RELEASES):
        return (f"ai-edge-litert {release or '(version unknown)'} is installed, and albert-edge drives the "
                f"C API of {', '.join(r + 'x' for r in CHECKED_RELEASES)} only")
    return None


def read_signature(path: str | os.PathLike) -> tuple[str, list[TensorSpec], list[TensorSpec]] | None:
    """(signature key, inputs, outputs) of a .tflite file with their shape signatures (-1 where
    dynamic); None when the file has no signature."""
    found = _read_signature(path)
    return found and found[1:]


def _read_signature(path: str | os.PathLike) -> tuple[int, str, list[TensorSpec], list[TensorSpec]] | None:
    """(index, key, inputs, outputs) of the signature CompiledTFLite runs, read from the
    flatbuffer through mmap so that only its few metadata pages are touched (the file is neither
    read nor copied whole)."""
    from ..formats import tflite_schema  # here, not at the top: an ONNX Session never needs it

    failure = None
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as raw:
            try:
                if not TFLITE.identifies(raw):
                    raise ValueError("no TFL3 identifier")
                # Model(...) over the mapping itself: Model.GetRootAs would copy the whole file.
                return _signature(tflite_schema, tflite_schema.Model(raw, struct.unpack_from("<I", raw, 0)[0]))
            except (ValueError, IndexError, TypeError, AttributeError, struct.error, UnicodeDecodeError) as exc:
                # Flatbuffer accessors read lazily: a damaged file fails wherever it is first
                # touched. The message is kept and the exception dropped here, so that nothing
                # still points into the mapping when it is closed.
                failure = f"{type(exc).__name__}: {exc}"
    except (OSError, ValueError, BufferError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    raise RuntimeUnavailable(f"{path}: not a readable TFLite model ({failure})")


def _signature(schema, model) -> tuple[int, str, list[TensorSpec], list[TensorSpec]] | None:
    types = {v: k for k, v in vars(schema.TensorType).items() if isinstance(v, int)}
    keys = [model.SignatureDefs(i).SignatureKey().decode() for i in range(model.SignatureDefsLength())]
    if not keys:
        return None
    index = keys.index(_SIGNATURE) if _SIGNATURE in keys else 0
    sig = model.SignatureDefs(index)
    sub = model.Subgraphs(sig.SubgraphIndex())

    def spec(entry) -> TensorSpec:
        t = sub.Tensors(entry.TensorIndex())
        dims = t.ShapeSignatureAsNumpy() if not t.ShapeSignatureIsNone() else t.ShapeAsNumpy()
        dims = () if isinstance(dims, int) else tuple(int(d) for d in dims)  # no view of the file kept
        return TensorSpec(name=entry.Name().decode(), dtype=_DTYPES.get(types.get(t.Type()), "?"), shape=dims)

    inputs = [spec(sig.Inputs(i)) for i in range(sig.InputsLength())]
    outputs = [spec(sig.Outputs(i)) for i in range(sig.OutputsLength())]
    return index, keys[index], inputs, outputs


def output_shape(spec: TensorSpec, feed_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape ``spec`` takes for inputs of ``feed_shape`` (batch, sequence): every albert-edge
    output is batch-first, and a dynamic second dimension is the sequence. None when the output's
    shape cannot be told that way (CompiledModel does not report output shapes after a resize,
    and a buffer too small for what the runtime writes is not an option)."""
    shape = []
    for i, d in enumerate(spec.shape):
        if d >= 0:
            shape.append(d)
        elif i < len(feed_shape):
            shape.append(feed_shape[i])
        else:
            return None
    return tuple(shape)


@contextlib.contextmanager
def _native_log() -> Iterator[Callable[[], str]]:
    """Keep LiteRT's C++ log off the terminal while it loads (INFO lines about the accelerators it
    registers and the delegate it creates), and yield a function that returns its first ERROR
    line, the reason for a failed call. With DEBUG logging on, the log is left alone."""
    if log.isEnabledFor(logging.DEBUG):
        yield lambda: ""
        return
    import tempfile  # here, not at the top: its imports cost an ONNX-only process ~1.3 MiB

    try:
        if sys.stderr is not None:
            sys.stderr.flush()
        captured, saved = tempfile.TemporaryFile(), os.dup(2)
    except (OSError, ValueError):  # no stderr (a daemon), or nowhere to hold its lines: leave them be
        yield lambda: ""
        return
    with captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield lambda: _first_error(captured)
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _weight_caches() -> int | None:
    """How many mappings of XNNPACK's in-memory weight cache this process holds (None: no /proc)."""
    try:
        with open("/proc/self/maps") as maps:
            return sum(_CACHE_MAPPING in line for line in maps)
    except OSError:
        return None


def _first_error(captured) -> str:
    """The first ERROR line: the cause (later ones say what failed because of it)."""
    captured.seek(0)
    lines = captured.read().decode(errors="replace").splitlines()
    return next((line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR")), "")


def _aligned(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A zeroed array whose data starts on a ``_ALIGN`` boundary, so LiteRT writes into it."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.zeros(count * dtype.itemsize + _ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)


class _Any(C.Structure):  # LiteRtAny: a type tag, then an 8-byte union (int64 here)
    _fields_ = [("type", C.c_int), ("value", C.c_int64)]


class _EnvOption(C.Structure):  # LiteRtEnvOption: 24 bytes, value at offset 8
    _fields_ = [("tag", C.c_int), ("value", _Any)]


class _RankedType(C.Structure):  # LiteRtRankedTensorType: element type, then LiteRtLayout (72 bytes)
    _fields_ = [("element_type", C.c_int), ("rank_bits", C.c_uint32), ("dims", C.c_int32 * 8),
                ("strides", C.c_uint32 * 8)]


@functools.cache  # loaded once per process; a failure is not cached
def _library() -> C.CDLL:
    path = library_path()
    try:
        lib = C.CDLL(str(path))
        lib.LiteRtCompiledModelResizeInputTensorNonStrict  # noqa: B018 - absent before LiteRT 2
    except (OSError, AttributeError, TypeError) as exc:
        raise RuntimeUnavailable(f"{path}: not a LiteRT 2 runtime library ({exc})") from None
    return lib


def _release(lib: C.CDLL, owned: list[tuple[str, int]], buffers: list[int]) -> None:
    """Destroy the tensor buffers, then the compiled model, model and environment (last made, first gone)."""
    for handle in buffers:
        lib.LiteRtDestroyTensorBuffer(C.c_void_p(handle))
    buffers.clear()
    if owned:
        with _native_log():  # an INFO line per accelerator destroyed
            while owned:
                name, handle = owned.pop()
                getattr(lib, name)(C.c_void_p(handle))


class CompiledTFLite:
    """A .tflite file run by LiteRT's CompiledModel on the CPU with XNNPACK's in-memory weight
    cache: each weight packed once however many nodes read it. Inputs are resized to each feed's
    shape (batch, sequence), like the Interpreter's signature runner.

    ``payloads`` adds LiteRT options as (identifier, TOML) pairs, e.g. the profiler's
    ``(b"runtime_options_string", b"enable_profiling = true\\n")``. ``lib`` and ``compiled`` are
    the C library and the LiteRtCompiledModel handle, for calls this class does not wrap.

    Raises RuntimeUnavailable when the file is not one this route can run safely (no signature,
    an output whose shape does not follow from the inputs', inputs of different shapes), so the
    caller can fall back to the classic Interpreter.
    """

    name = "ai_edge_litert"
    accelerator = "xnnpack"

    def __init__(self, path: str | os.PathLike, num_threads: int | None = None,
                 payloads: tuple[tuple[bytes, bytes], ...] = ()):
        reason = unavailable_reason()
        if reason is not None:
            raise RuntimeUnavailable(f"LiteRT's CompiledModel cannot run here: {reason}")
        signature = _read_signature(path)
        if signature is None:
            raise RuntimeUnavailable(f"{path}: no signature; CompiledModel runs signatures only")
        self._index, self._key, self.inputs, self.outputs = signature
        if any(s.name == "passes" for s in self.outputs):
            # An adaptive file (convert --adaptive): its outputs leave a loop that ends on the data as
            # dynamic tensors, which CompiledModel cannot bind (it answered zeros, then failed).
            raise RuntimeUnavailable(f"{path}: an adaptive file's outputs come out of its loop, which CompiledModel "
                                     "cannot bind")
        if len({len(s.shape) for s in self.inputs}) != 1 or any(
                output_shape(s, (1,) * len(self.inputs[0].shape)) is None for s in self.outputs):
            raise RuntimeUnavailable(f"{path}: output shapes do not follow from the input shapes")
        self.lib = _library()
        owned: list[tuple[str, int]] = []
        self._buffers: list[int] = []  # LiteRT tensor buffers over self._arrays
        self._closer = weakref.finalize(self, _release, self.lib, owned, self._buffers)
        cpu = f'weight_cache_file_path = "{WEIGHT_CACHE}"\n'
        if num_threads:
            cpu += f"num_threads = {int(num_threads)}\n"
        caches = _weight_caches()
        with _native_log() as problem:
            try:
                self.compiled = self._compile(path, owned, ((b"xnnpack", cpu.encode()), *payloads))
            except RuntimeUnavailable as exc:
                self.close()
                reason = problem()
                raise RuntimeUnavailable(f"{path}: LiteRT's CompiledModel cannot run it: {exc}"
                                         f"{f' ({reason})' if reason else ''}") from None
        if caches is not None and _weight_caches() == caches:
            # A LiteRT that does not know the option ignores it and packs per node.
            self.close()
            raise RuntimeUnavailable(f"{path}: XNNPACK's weight cache did not turn on (ai-edge-litert older than 2.3?)")
        self._shape: tuple[int, ...] | None = None
        self._arrays: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
        self._handles: tuple[C.Array, C.Array] | None = None

    def call(self, function: str, *args) -> None:
        """Call LiteRT's C ``function``; RuntimeUnavailable naming it when it does not return Ok."""
        status = getattr(self.lib, function)(*args)
        if status != 0:
            raise RuntimeUnavailable(f"{function} failed ({_STATUS.get(status, 'status')} {status})")

    def _compile(self, path, owned: list[tuple[str, int]], payloads) -> C.c_void_p:
        """A compiled model of ``path`` on the CPU accelerator alone; each handle is recorded in
        ``owned`` as soon as it exists, so a failure half way frees what was made."""
        env, model, options, compiled = C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_void_p()
        # Register the CPU accelerator only: no NPU or GPU discovery, no WebGPU library loaded.
        cpu_only = (_EnvOption * 1)(_EnvOption(_AUTO_REGISTER_ACCELERATORS, _Any(_ANY_INT, _CPU)))
        self.call("LiteRtCreateEnvironment", C.c_int(1), cpu_only, C.byref(env))
        owned.append(("LiteRtDestroyEnvironment", env.value))
        self.call("LiteRtCreateModelFromFile", env, os.fsencode(path), C.byref(model))
        owned.append(("LiteRtDestroyModel", model.value))
        self.call("LiteRtCreateOptions", C.byref(options))
        try:
            self.call("LiteRtSetOptionsHardwareAccelerators", options, C.c_int(_CPU))
            libc = C.CDLL(None)
            libc.strdup.restype, libc.strdup.argtypes = C.c_void_p, [C.c_char_p]
            for identifier, toml in payloads:  # LiteRT frees each payload with free()
                opaque = C.c_void_p()
                self.call("LiteRtCreateOpaqueOptions", C.c_char_p(identifier), C.c_void_p(libc.strdup(toml)),
                          C.cast(libc.free, C.c_void_p), C.byref(opaque))
                self.call("LiteRtAddOpaqueOptions", options, opaque)
            self.call("LiteRtCreateCompiledModel", env, model, options, C.byref(compiled))
        finally:
            self.lib.LiteRtDestroyOptions(options)
        owned.append(("LiteRtDestroyCompiledModel", compiled.value))
        return compiled

    def _prepare(self, shape: tuple[int, ...]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Input and output arrays for feeds of ``shape``, with LiteRT buffers over them; re-made
        only when the shape changes."""
        if shape != self._shape:
            self._shape = None
            _release(self.lib, [], self._buffers)
            dims = (C.c_int * len(shape))(*shape)
            for i in range(len(self.inputs)):
                self.call("LiteRtCompiledModelResizeInputTensorNonStrict", self.compiled, C.c_size_t(self._index),
                          C.c_size_t(i), dims, C.c_size_t(len(shape)))
            ins = [_aligned(shape, s.dtype) for s in self.inputs]
            outs = [_aligned(output_shape(s, shape), s.dtype) for s in self.outputs]
            handles = [self._buffer(a) for a in ins], [self._buffer(a) for a in outs]
            self._handles = tuple((C.c_void_p * len(h))(*h) for h in handles)
            self._arrays, self._shape = (ins, outs), shape
        return self._arrays

    def _buffer(self, array: np.ndarray) -> int:
        kind = _RankedType(element_type=_ELEMENT_TYPES[array.dtype.name], rank_bits=array.ndim)
        kind.dims[:array.ndim] = array.shape
        handle = C.c_void_p()
        self.call("LiteRtCreateTensorBufferFromHostMemory", C.byref(kind), C.c_void_p(array.ctypes.data),
                  C.c_size_t(array.nbytes), None, C.byref(handle))
        self._buffers.append(handle.value)
        return handle.value

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        shapes = {v.shape for v in feeds.values()}
        if len(shapes) != 1:
            raise ValueError(f"inputs must all have one shape; got {sorted(shapes)}")
        ins, outs = self._prepare(shapes.pop())
        for spec, array in zip(self.inputs, ins):
            array[...] = feeds[spec.name]
        status = self.lib.LiteRtRunCompiledModel(self.compiled, C.c_size_t(self._index), C.c_size_t(len(ins)),
                                                 self._handles[0], C.c_size_t(len(outs)), self._handles[1])
        if status != 0:
            raise RuntimeError(f"LiteRT's CompiledModel failed to run ({_STATUS.get(status, 'status')} {status})")
        return {spec.name: a.copy() for spec, a in zip(self.outputs, outs)}

    def close(self) -> None:
        """Free LiteRT's objects now rather than when this object is collected."""
        self._closer()


def open_tflite(path: Path, num_threads: int | None):
    """The weights-once backend for ``path``, or None (logged) when this route cannot run it."""
    try:
        return CompiledTFLite(path, num_threads)
    except RuntimeUnavailable as exc:
        log.info("weights packed per node: %s", exc)
        return None
