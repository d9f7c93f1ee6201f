"""What ``Session(path, accelerator="gpu")`` runs: a static-shape .tflite on LiteRT's GPU accelerator
(ai-edge-litert's ``CompiledModel`` with ``HardwareAccelerator.GPU | CPU``, the operators it does
not take on the CPU), in this process, as an app runs it; an .onnx on onnxruntime's CUDA provider.

The placement (operators on the GPU and on the CPU, each fallback with the accelerator's reason, the
adapter it selected) is read from the accelerator's own report, its log while the file compiles:
this module holds the process's stdout and stderr for that moment and gives the lines to
:mod:`.accelerator`'s parser, the one that reads the same log from a child. The GPU computes in
float32 by default here (``GpuOptions(enforce_f32=True)``: within 1e-5 of the CPU); "fp16" is the
accelerator's own default, faster on a phone's GPU and about 1e-2 off.

On a software Vulkan device (Mesa's lavapipe, "llvmpipe" to the accelerator) the GPU path runs and
computes right, and its timings mean nothing: :func:`software_adapter` tells one.

Device side: numpy and ai-edge-litert (imported when a file is opened).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..errors import RuntimeUnavailable, optional_import
from .accelerator import (GpuPlacement, StaticShapeOnly, _input_shapes, _no_adapter_detail, _no_vulkan, _op_count,
                          _parse, _placement, _refusal_message)
from .compiled import read_signature
from .engines import version_of

__all__ = ["ACCELERATORS", "PRECISIONS", "GpuTFLite", "onnx_gpu_provider", "software_adapter", "software_warning"]

log = logging.getLogger(__name__)

ACCELERATORS = ("cpu", "gpu")
# GPU arithmetic: "fp32" keeps it in float32 (GpuOptions.enforce_f32), "fp16" is the accelerator's default.
PRECISIONS = {"fp32": True, "fp16": False}
_SOFTWARE = ("llvmpipe", "lavapipe", "swiftshader")
NO_CUDA = ("CUDAExecutionProvider is not available in this onnxruntime build: install onnxruntime-gpu on a "
           "machine with CUDA")


def software_adapter(adapter: str | None) -> str | None:
    """The name of the software Vulkan device ``adapter`` is ("llvmpipe"), None for a real GPU.
    The accelerator names its adapter as "llvmpipe (LLVM 15.0.6, 256 bits), arch=software, ..."."""
    if not adapter:
        return None
    text = adapter.lower()
    found = next((name for name in _SOFTWARE if name in text), None)
    if found is None and ("arch=software" in text or "adaptertype=cpu" in text):
        found = adapter.split(" (")[0].split(",")[0].strip() or "software"
    return found


def software_warning(adapter: str | None) -> str | None:
    """The warning a measurement on a software Vulkan device carries, None on a real GPU."""
    name = software_adapter(adapter)
    if name is None:
        return None
    return (f"timings on a software Vulkan device ({name}) mean nothing: it proves the GPU path takes the file "
            "and computes right, not how fast")


def onnx_gpu_provider(provider: str | None) -> str:
    """The onnxruntime provider ``accelerator="gpu"`` runs an .onnx on: ``provider`` when it names a
    GPU one, else CUDA; RuntimeUnavailable in one line when this onnxruntime build lacks it."""
    from .onnx_engine import PROVIDERS

    wanted = PROVIDERS.get((provider or "cuda").lower(), provider)
    if wanted == PROVIDERS["cpu"]:
        wanted = PROVIDERS["cuda"]
    available = optional_import("onnxruntime").get_available_providers()
    if wanted not in available:
        if wanted == PROVIDERS["cuda"]:
            raise RuntimeUnavailable(NO_CUDA)
        raise RuntimeUnavailable(f"{wanted} is not available in this onnxruntime build: install onnxruntime-gpu "
                                 "on a machine with CUDA")
    return wanted


@contextlib.contextmanager
def _held_output() -> Iterator[list[str]]:
    """Hold this process's stdout and stderr (file descriptors 1 and 2) in a temporary file while
    the block runs, and put their lines in the yielded list when it ends: LiteRT logs on stderr,
    Dawn (WebGPU) writes its warnings on stdout."""
    lines: list[str] = []
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    try:
        held = tempfile.TemporaryFile()
        saved = os.dup(1), os.dup(2)
    except OSError:  # nowhere to hold them: the placement then rests on is_fully_accelerated alone
        yield lines
        return
    with held:
        os.dup2(held.fileno(), 1)
        os.dup2(held.fileno(), 2)
        try:
            yield lines
        finally:
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None).fflush(None)  # C stdio's buffered stdout, before it is given back
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            held.seek(0)
            lines.extend(held.read().decode(errors="replace").splitlines())
    if log.isEnabledFor(logging.DEBUG):
        log.debug("LiteRT's log while compiling:\n%s", "\n".join(lines))


class GpuTFLite:
    """A static-shape .tflite compiled for LiteRT's GPU accelerator, the CPU taking what it leaves.
    ``placement`` says where its operators went, from the accelerator's own report.

    Raises StaticShapeOnly for a file with dynamic shapes (before anything compiles),
    NoVulkanDevice when the accelerator finds no adapter, RuntimeUnavailable when it refuses the
    file otherwise (its reason in the message)."""

    name = "ai_edge_litert"
    accelerator = "gpu"
    weights_once = None  # how the GPU holds a shared weight is not measured here

    def __init__(self, path: str | os.PathLike, num_threads: int | None = None, precision: str = "fp32"):
        if precision not in PRECISIONS:
            raise RuntimeUnavailable(f"unknown GPU precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
        self.path, self.precision = Path(path), precision
        signature = read_signature(self.path)
        if signature is None:
            raise RuntimeUnavailable(f"{self.path}: no signature; LiteRT's CompiledModel runs signatures only")
        self._key, self.inputs, self.outputs = signature
        shapes = _input_shapes(self.path)
        if any(d < 0 for shape in shapes for d in shape):
            raise StaticShapeOnly(_refusal_message(self.path, "inputs are dynamic-sized", shapes))
        if "tensorflow" in sys.modules:
            # Measured with tensorflow 2.x: CompiledModel.from_file dies with SIGSEGV on the GPU then.
            raise RuntimeUnavailable(
                "LiteRT's GPU accelerator crashes in a process that has imported TensorFlow: open the file on the "
                "GPU in a process without tensorflow (albert_edge.runtime.accelerator.run_on_gpu runs it in a child)")
        enforce_f32 = PRECISIONS[precision]
        compiled_model = optional_import("ai_edge_litert.compiled_model")
        from ai_edge_litert.cpu_options import CpuOptions
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
        from ai_edge_litert.options import GpuOptions, Options

        options = Options(hardware_accelerators=HardwareAccelerator.GPU | HardwareAccelerator.CPU,
                          cpu_options=CpuOptions(num_threads=int(num_threads or 0)),
                          gpu_options=GpuOptions(enforce_f32=enforce_f32))
        answer = {"runtime": f"ai-edge-litert {version_of('ai_edge_litert') or 'unknown'}"}
        self._model = None
        with _held_output() as lines:
            try:
                self._model = compiled_model.CompiledModel.from_file(str(self.path), options=options)
            except RuntimeError as exc:
                answer["error"] = " ".join(str(exc).split())
        report = _parse("\n".join(lines))
        if report.no_adapter:
            raise _no_vulkan(_no_adapter_detail())
        if self._model is not None:
            answer["fully_accelerated"] = bool(self._model.is_fully_accelerated())
        self.placement: GpuPlacement = _placement(self.path, _op_count(self.path), answer, report, enforce_f32)
        self.placement.check()
        model, self._model = self._model, None  # held in self._held only, so that its finalizer frees it
        self._index = model.get_signature_index(self._key)
        names = model.get_signature_list()[self._key]
        self._in_names, self._out_names = names["inputs"], names["outputs"]
        with _held_output():  # LiteRT's INFO lines as it makes the buffers' environment
            ins, outs = model.create_input_buffers(self._index), model.create_output_buffers(self._index)
        details = model.get_output_tensor_details(self._key)
        self._out_shapes = {n: (tuple(details[n]["shape"]), np.dtype(details[n]["dtype"])) for n in self._out_names}
        self._in_dtypes = {s.name: np.dtype(s.dtype) for s in self.inputs}
        self._ran = False
        # LiteRT logs a line per accelerator it destroys: held too, when this object goes.
        self._held = [model, ins, outs]
        self._closer = weakref.finalize(self, _release, self._held)

    @property
    def adapter(self) -> str | None:
        return self.placement.adapter

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self._ran:
            with _held_output():  # the first call makes an environment of its own, and LiteRT says so
                results = self._run(feeds)
            self._ran = True
            return results
        return self._run(feeds)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self._held:
            raise RuntimeUnavailable(f"{self.path}: the GPU session is closed")
        model, ins, outs = self._held
        for name, buffer in zip(self._in_names, ins):
            buffer.write(np.ascontiguousarray(feeds[name], dtype=self._in_dtypes[name]))
        model.run_by_index(self._index, ins, outs)
        results = {}
        for name, buffer in zip(self._out_names, outs):
            shape, dtype = self._out_shapes[name]
            results[name] = buffer.read(int(np.prod(shape)), dtype).reshape(shape)
        return {s.name: results[s.name] for s in self.outputs}

    def close(self) -> None:
        """Free LiteRT's objects now rather than when this object is collected."""
        self._closer()


def _release(held: list) -> None:
    with _held_output():
        held.clear()
