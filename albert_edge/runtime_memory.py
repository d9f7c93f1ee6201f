"""Shared weights packed once in memory, not only stored once in the file.

XNNPACK packs every weight a fully-connected node reads into its own layout, once per node. An
ALBERT file stores each shared weight once, but its L layers reach it through L nodes, so the
classic TFLite ``Interpreter`` (XNNPACK on by default) holds L packed copies: ALBERT-base int8
peaks at ~150 MiB for an 11.5 MiB file, fp32 at ~420 MiB for 44 MiB. XNNPACK's weight cache
keys each packed weight by the file buffer it came from, so nodes that share a buffer share one
packed copy. The classic ``Interpreter`` of ai-edge-litert offers no way to turn the cache on;
LiteRT's ``CompiledModel`` does (``CpuOptions.xnnpack_weight_cache_path``), and with the
in-memory cache (no file to manage) the same file peaks at ~75 MiB (int8) and ~117 MiB (fp32),
with the same outputs bit for bit and the same speed (``benchmarks/memory.py``).

Where the rest of an int8 ALBERT-base process goes (ai-edge-litert 2.3, x86-64, 2 threads, a
call at 32 then at 128 tokens; /proc/self/smaps by mapping): Python and numpy 26 MiB; importing
ai-edge-litert 13 MiB; loading 17 MiB (library pages, among them 3.8 MiB of the WebGPU
accelerator that LiteRT's environment loads whatever the options, 2.3 MiB of the file mapping,
~8 MiB of runtime structures); the weight cache 6.9 MiB (the int8 encoder weights, packed once;
the file pages they came from are not kept resident); activations ~5 MiB more at 128 than at
32. Reading the model from a buffer instead of the path costs 8.6 MiB more; XNNPACK's flags and
LiteRT's environment options change nothing measurable.

``CompiledTFLite`` is the ``Session`` backend for that route. Device side: numpy and
ai-edge-litert only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import mmap
import os
import platform
import struct
import sys
from pathlib import Path

import numpy as np

from .converters.graph import TensorSpec
from .errors import RuntimeUnavailable

__all__ = ["CompiledTFLite", "WEIGHT_CACHE", "available", "cpu_runs_compiled_model", "read_signature",
           "output_shape"]

log = logging.getLogger(__name__)

# XNNPACK's name for a weight cache that lives in anonymous memory rather than a file.
WEIGHT_CACHE = ":memory"
_SIGNATURE = "serving_default"
# LiteRT's host-memory tensor buffers must start on this boundary, or it copies them.
_ALIGN = 64
_DTYPES = {"FLOAT32": "float32", "FLOAT16": "float16", "INT32": "int32", "INT64": "int64",
           "INT8": "int8", "UINT8": "uint8", "INT16": "int16", "BOOL": "bool"}


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


def available() -> bool:
    """Whether LiteRT's CompiledModel (ai-edge-litert 2.x) is installed and runs on this CPU."""
    try:
        installed = importlib.util.find_spec("ai_edge_litert.compiled_model") is not None
    except ImportError:
        installed = False
    return installed and cpu_runs_compiled_model()


def read_signature(path: str | os.PathLike) -> tuple[str, list[TensorSpec], list[TensorSpec]] | None:
    """(signature key, inputs, outputs) of a .tflite file with their shape signatures (-1 where
    dynamic), read from the flatbuffer through mmap so that only its few metadata pages are
    touched; None when the file has no signature."""
    from ai_edge_litert import schema_py_generated as schema

    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as raw:
            if raw[4:8] != b"TFL3":
                raise ValueError("no TFL3 identifier")
            return _signature(schema, raw)
    except (OSError, ValueError, IndexError, TypeError, struct.error, UnicodeDecodeError) as exc:
        # Flatbuffer accessors read lazily: a damaged file fails wherever it is first touched.
        raise RuntimeUnavailable(f"{path}: not a readable TFLite model ({type(exc).__name__}: {exc})") from None


def _signature(schema, raw) -> tuple[str, list[TensorSpec], list[TensorSpec]] | None:
    types = {v: k for k, v in vars(schema.TensorType).items() if isinstance(v, int)}
    model = schema.Model.GetRootAs(raw, 0)
    keys = [model.SignatureDefs(i).SignatureKey().decode() for i in range(model.SignatureDefsLength())]
    if not keys:
        return None
    key = _SIGNATURE if _SIGNATURE in keys else keys[0]
    sig = model.SignatureDefs(keys.index(key))
    sub = model.Subgraphs(sig.SubgraphIndex())

    def spec(entry) -> TensorSpec:
        t = sub.Tensors(entry.TensorIndex())
        dims = t.ShapeSignatureAsNumpy() if not t.ShapeSignatureIsNone() else t.ShapeAsNumpy()
        dims = () if isinstance(dims, int) else tuple(int(d) for d in dims)
        return TensorSpec(name=entry.Name().decode(), dtype=_DTYPES.get(types.get(t.Type()), "?"), shape=dims)

    inputs = [spec(sig.Inputs(i)) for i in range(sig.InputsLength())]
    outputs = [spec(sig.Outputs(i)) for i in range(sig.OutputsLength())]
    return key, inputs, outputs


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
def _quiet_native_stderr():
    """Keep LiteRT's C++ log off the terminal while it compiles: ~20 INFO/WARNING lines on every
    load about accelerator and vendor-plugin discovery (GPU, NPU, OpenVINO) that a CPU run does
    not use. Errors still arrive as exceptions; with DEBUG logging on, the lines are left alone."""
    if log.isEnabledFor(logging.DEBUG):
        yield
        return
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _aligned(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A zeroed array whose data starts on a ``_ALIGN`` boundary, so LiteRT writes into it."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.zeros(count * dtype.itemsize + _ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)


class CompiledTFLite:
    """A .tflite file run by LiteRT's CompiledModel on the CPU with XNNPACK's in-memory weight
    cache: each weight packed once however many nodes read it. Inputs are resized to each feed's
    shape (batch, sequence), like the Interpreter's signature runner.

    Raises RuntimeUnavailable when the file is not one this route can run safely (no signature,
    an output whose shape does not follow from the inputs', inputs of different shapes), so the
    caller can fall back to the classic Interpreter.
    """

    name = "ai_edge_litert"
    accelerator = "xnnpack"

    def __init__(self, path: str | os.PathLike, num_threads: int | None = None):
        if not available():
            raise RuntimeUnavailable("LiteRT's CompiledModel needs ai-edge-litert 2 or newer, and on Arm a CPU "
                                     "with the ARMv8.2 fp16 and dot-product extensions")
        signature = read_signature(path)
        if signature is None:
            raise RuntimeUnavailable(f"{path}: no signature; CompiledModel runs signatures only")
        self._key, self.inputs, self.outputs = signature
        if len({len(s.shape) for s in self.inputs}) != 1 or any(
                output_shape(s, (1,) * len(self.inputs[0].shape)) is None for s in self.outputs):
            raise RuntimeUnavailable(f"{path}: output shapes do not follow from the input shapes")
        try:
            from ai_edge_litert.compiled_model import CompiledModel
            from ai_edge_litert.options import CpuOptions, Options

            # An ai-edge-litert older than 2.3 has no weight-cache option (TypeError) or no options module.
            cpu = CpuOptions(num_threads=int(num_threads or 0), xnnpack_weight_cache_path=WEIGHT_CACHE)
            with _quiet_native_stderr():
                self._model = CompiledModel.from_file(str(path), options=Options(cpu_options=cpu))
        except (ImportError, TypeError, ValueError, RuntimeError) as exc:
            from .runtime import _first_line  # runtime imports this module

            raise RuntimeUnavailable(f"{path}: LiteRT's CompiledModel cannot run it: {_first_line(exc)}") from None
        self._index = {name: i for i, name in enumerate(self._model.get_signature_list()[self._key]["inputs"])}
        self._shape: tuple[int, ...] | None = None
        self._buffers: tuple[dict, dict, dict[str, np.ndarray]] | None = None

    def _prepare(self, shape: tuple[int, ...]):
        """Input and output buffers for feeds of ``shape``, re-made only when the shape changes."""
        if shape != self._shape:
            from ai_edge_litert.tensor_buffer import TensorBuffer

            for name, i in self._index.items():
                self._model.resize_input_tensor(i, list(shape), strict=False)
            ins = {name: self._model.create_input_buffer_by_name(self._key, name) for name in self._index}
            arrays = {s.name: _aligned(output_shape(s, shape), s.dtype) for s in self.outputs}
            outs = {name: TensorBuffer.create_from_host_memory(a) for name, a in arrays.items()}
            self._buffers, self._shape = (ins, outs, arrays), shape
        return self._buffers

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        shapes = {v.shape for v in feeds.values()}
        if len(shapes) != 1:
            raise ValueError(f"inputs must all have one shape; got {sorted(shapes)}")
        ins, outs, arrays = self._prepare(shapes.pop())
        for name, buffer in ins.items():
            buffer.write(feeds[name])
        self._model.run_by_name(self._key, ins, outs)
        return {name: a.copy() for name, a in arrays.items()}


def open_tflite(path: Path, num_threads: int | None):
    """The weights-once backend for ``path``, or None (logged) when this route cannot run it."""
    try:
        return CompiledTFLite(path, num_threads)
    except RuntimeUnavailable as exc:
        log.info("weights packed per node: %s", exc)
        return None
