"""Run an exported model file on the device: one small API over onnxruntime, the TFLite
interpreter and ExecuTorch. Imports neither torch nor tensorflow (tensorflow.lite only as the last
resort for .tflite files, when no standalone interpreter is installed; torch only for .pte files
when executorch's own bindings are the only ExecuTorch installed).

- :mod:`.engines`: which engines of a format are installed here, and their versions;
- :mod:`.onnx_engine`: how an .onnx file is opened in onnxruntime (weights mapped, not copied);
- :mod:`.compiled`: .tflite through LiteRT's CompiledModel, each shared weight packed once;
- :mod:`.litert`: .tflite through the classic ``Interpreter`` (XNNPACK off, or the route above declined);
- :mod:`.pte_engine`: ExecuTorch .pte files, XNNPACK's weights cache on (each shared weight packed once);
- :mod:`.accelerator`: ``accelerator="gpu"``: a static .tflite on LiteRT's GPU accelerator (and its placement,
  measured in a child), an .onnx on CUDA;
- :mod:`.static`: what a static-shape file (``convert --static``) takes, and the one line when fed otherwise.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from ..errors import RuntimeUnavailable
from ..formats import FORMATS, format_of
from ..formats.graph import TensorSpec
from ..formats.kinds import EXECUTORCH, ONNX, ORT, TFLITE, Format, of_file
from . import compiled
from .litert import DELEGATES, InterpreterBackend
from .onnx_engine import PROVIDERS, OnnxBackend
from .pte_engine import PteBackend
from .static import feed_problem, static_length

__all__ = ["Session", "TensorSpec", "FORMATS", "format_of", "PROVIDERS", "DELEGATES", "ACCELERATORS",
           "GPU_PRECISIONS"]

ACCELERATORS = ("cpu", "gpu")
GPU_PRECISIONS = ("fp32", "fp16")

log = logging.getLogger(__name__)

class Session:
    """A loaded model file. ``inputs``/``outputs`` describe its tensors; ``run`` takes numpy
    arrays by input name and returns numpy arrays by output name.

    Integer feeds are cast to the dtype the model wants (int64 for our ONNX files, int32 for
    TFLite). TFLite inputs are resized to the shape of each feed, so one file serves any batch
    size and sequence length. A static-shape file (``convert --static``: [1, N] inputs,
    ``static_len`` N) takes feeds of that shape only: others are refused in one line
    (StaticShapeMismatch, a ValueError) naming the fix, on every accelerator; pad to N with
    attention_mask 0, as an app does.

    ``accelerator`` is where the model computes: "cpu" (the default) or "gpu". On "gpu" a .tflite
    runs through LiteRT's GPU accelerator (its CompiledModel with the GPU first and the CPU for the
    operators the GPU does not take), static-shape files only (StaticShapeOnly for a dynamic one,
    NoVulkanDevice where the accelerator finds no device); ``gpu_precision`` "fp32" (the default:
    float32 arithmetic, within 1e-5 of the CPU) or "fp16" (the accelerator's own default, faster
    on a phone's GPU). ``placement`` then says where its operators went, from the accelerator's own
    report (:class:`~albert_edge.runtime.accelerator.GpuPlacement`: ops on the GPU and the CPU, each
    fallback with its reason, the adapter); None on the CPU. An .onnx on "gpu" runs on
    onnxruntime's CUDA provider (or the GPU ``provider`` named). On a software Vulkan device
    (lavapipe) the GPU path runs and computes right, and its timings mean nothing.

    ``provider`` picks the onnxruntime execution provider ("cpu", "cuda", "tensorrt" or the full
    provider name; default CPU) and ``delegate`` the TFLite delegate ("xnnpack", the
    interpreter's default, or "none"); each applies only to its format. ``accelerator`` names what
    really runs the model: the first provider of the onnxruntime session, the delegate, or "gpu".
    ``ops_trace`` (ONNX only) turns on onnxruntime's profiler, writing its JSON trace under that
    path prefix; ``end_profiling()`` stops it and returns the trace file.
    ``weights_once`` (TFLite with XNNPACK) runs the file through LiteRT's CompiledModel with
    XNNPACK's weight cache, so a weight shared by L layers is packed once instead of L times
    (see albert_edge.runtime.compiled); for .pte files it switches on XNNPACK's weights cache in
    ExecuTorch (albert_edge.runtime.pte_engine). ``self.weights_once`` says whether each shared
    weight is held once. A .pte's inputs are int64 (batch, sequence), sequence up to the bound it
    was exported with; it runs the delegates it was lowered for (``delegate`` "xnnpack" only).

    ``kind`` is the file's entry in the table of formats (:mod:`albert_edge.formats.kinds`), looked
    up once from its suffix; ``format`` its name, as records write it ("onnx", "ort", "tflite",
    "executorch").

    ``app_defaults`` opens the file as an app does: the runtime's own API with its default
    options, the thread count the only setting (what `profile --as-app` measures). A .tflite then
    runs in the classic ``Interpreter`` with its default XNNPACK delegate, which packs weights per
    operator (each shared weight once only from a loop file, ``convert``'s default form); an
    .onnx/.ort in ``InferenceSession`` by path, onnxruntime's optimizers and memory pattern on and
    the weights read from the file rather than mapped; a .pte without XNNPACK's weights cache.
    """

    def __init__(self, path: str | os.PathLike, num_threads: int | None = None, provider: str | None = None,
                 delegate: str = "xnnpack", ops_trace: str | os.PathLike | None = None,
                 weights_once: bool = True, app_defaults: bool = False, accelerator: str = "cpu",
                 gpu_precision: str = "fp32"):
        self.path = Path(path)
        if not self.path.is_file():
            raise RuntimeUnavailable(f"{self.path}: no such model file")
        self.kind: Format = of_file(self.path)
        self.format: str = self.kind.name  # what records call it
        self.num_threads = num_threads
        self.app_defaults = app_defaults
        _check_accelerator(accelerator, gpu_precision, self.kind, app_defaults, delegate)
        self.gpu_precision: str | None = gpu_precision if accelerator == "gpu" else None
        if self.kind.structure_check is not None:
            # A damaged .tflite can crash the interpreter, not just fail to load; a damaged .ort
            # gets one line here, not a retry announced on stdout by onnxruntime.
            self.kind.structure_check(self.path)
        if ops_trace is not None and not self.kind.onnxruntime:
            raise RuntimeUnavailable("per-operator tracing is offered for .onnx files only")
        if accelerator == "gpu":
            self._backend = self._gpu_backend(provider, ops_trace)
        else:
            self._backend = _OPEN[self.kind](self.path, num_threads, provider=provider, delegate=delegate,
                                             ops_trace=ops_trace, weights_once=weights_once and not app_defaults,
                                             app_defaults=app_defaults)
        self.weights_once: bool = getattr(self._backend, "weights_once",
                                          isinstance(self._backend, compiled.CompiledTFLite))
        self.inputs: list[TensorSpec] = self._backend.inputs
        self.outputs: list[TensorSpec] = self._backend.outputs
        self.backend_name: str = self._backend.name
        self.accelerator: str = self._backend.accelerator
        self.placement = getattr(self._backend, "placement", None)
        # N of a static-shape file's [1, N] inputs (a .pte declares its upper bounds instead)
        shapes = [s.shape for s in self.inputs]
        self.static_len: int | None = static_length(shapes) if self.kind.static_shapes else None
        sized_at_run_time = self.kind.sized_at_run_time
        if self.static_len is not None and sized_at_run_time is not None and sized_at_run_time(self.path):
            self.static_len = None  # fixed inputs over a graph that resizes (a MediaPipe task file)

    def _gpu_backend(self, provider: str | None, ops_trace):
        """The backend of ``accelerator="gpu"``: LiteRT's GPU accelerator for a .tflite, a GPU
        execution provider for an .onnx / .ort."""
        from .accelerator import GpuTFLite, onnx_gpu_provider

        if self.kind.onnxruntime:
            return OnnxBackend(self.path, self.num_threads, onnx_gpu_provider(provider), ops_trace)
        return GpuTFLite(self.path, self.num_threads, self.gpu_precision)

    def set_exit_setting(self, value: float) -> float:
        """An adaptive file's (convert --adaptive) exit-rule setting (its patience, confidence or
        entropy) from the next run on, without another file: the TFLite file's ``set_exit_setting``
        signature, the ONNX file's optional ``exit_setting`` input. Returns the setting in effect;
        ValueError (one line) for a file that is not adaptive or a value outside the rule's range."""
        setter = getattr(self._backend, "set_exit_setting", None)
        try:
            if setter is None:
                raise ValueError("it is not adaptive (convert --adaptive): it has no exit setting")
            return setter(value)
        except ValueError as exc:
            raise ValueError(f"{self.path.name}: {exc}") from None

    def end_profiling(self) -> Path | None:
        """Stop onnxruntime's profiler and return its trace file (None when it was not on)."""
        end = getattr(self._backend, "end_profiling", None)
        return end() if end else None

    @property
    def takes_text(self) -> bool:
        """Whether the file's input is the text itself (``convert --to onnx-text``: one string,
        shape [1], its tokenizer inside); feed it ``{"text": np.array([text], dtype=object)}``."""
        return any(s.dtype == "object" for s in self.inputs)

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._backend.run(self._checked(feeds))

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], dict[str, np.ndarray]]:
        """``run`` split in two: check and cast ``feeds`` now, and return a call that runs the
        model on them (what a timed loop calls, so it times the runtime, not our checks)."""
        cast = self._checked(feeds)
        backend_run = self._backend.run
        return lambda: backend_run(cast)

    def _checked(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [name for name in self.input_names if name not in feeds]
        unknown = [name for name in feeds if name not in self.input_names]
        if missing or unknown:
            raise ValueError(
                f"{self.path.name}: feeds must be exactly {', '.join(self.input_names)}"
                f" (missing: {', '.join(missing) or '-'}; unknown: {', '.join(unknown) or '-'})"
            )
        if self.static_len is not None:
            problem = feed_problem(self.path, self.static_len, {n: tuple(np.shape(feeds[n])) for n in self.input_names})
            if problem is not None:
                raise problem
        return {spec.name: _cast(feeds[spec.name], spec) for spec in self.inputs}

    def __repr__(self) -> str:
        return f"Session({str(self.path)!r}, backend={self.backend_name!r})"


def _check_accelerator(accelerator: str, gpu_precision: str, kind: Format, app_defaults: bool,
                       delegate: str) -> None:
    """One line for an accelerator that does not combine with the file or the other options."""
    if accelerator not in ACCELERATORS:
        raise RuntimeUnavailable(f"unknown accelerator {accelerator!r}; expected one of {', '.join(ACCELERATORS)}")
    if gpu_precision not in GPU_PRECISIONS:
        raise RuntimeUnavailable(f"unknown GPU precision {gpu_precision!r}; expected one of "
                                 f"{', '.join(GPU_PRECISIONS)}")
    if accelerator == "cpu":
        return
    if not kind.gpu:
        raise RuntimeUnavailable("accelerator 'gpu' runs .tflite files (LiteRT's GPU accelerator) and .onnx / .ort "
                                 "files (onnxruntime's CUDA provider); a .pte runs on the CPU here")
    if app_defaults:
        raise RuntimeUnavailable("app_defaults opens a file with the runtime's default options, on the CPU; "
                                 "accelerator 'gpu' is another setting: use one or the other")
    if kind.takes_delegates and delegate != "xnnpack":
        raise RuntimeUnavailable(f"delegate {delegate!r} is a CPU setting; on accelerator 'gpu' the operators the "
                                 "GPU does not take run on XNNPACK")


def _open_onnx(path: Path, num_threads: int | None, *, provider: str | None, ops_trace, app_defaults: bool,
               **_):
    return OnnxBackend(path, num_threads, provider, ops_trace, app_defaults=app_defaults)


def _open_pte(path: Path, num_threads: int | None, *, delegate: str, weights_once: bool, **_):
    return PteBackend(path, num_threads, delegate, weights_once)


def _open_tflite(path: Path, num_threads: int | None, *, delegate: str, weights_once: bool, **_):
    backend = None
    if weights_once and delegate == "xnnpack":  # each shared weight packed once, not per layer
        backend = compiled.open_tflite(path, num_threads)
    return backend if backend is not None else InterpreterBackend(path, num_threads, delegate)


# How each format opens on the CPU: one opener per entry of the table of formats.
_OPEN: dict[Format, Callable[..., object]] = {ONNX: _open_onnx, ORT: _open_onnx, TFLITE: _open_tflite,
                                              EXECUTORCH: _open_pte}


def _cast(value: np.ndarray, spec: TensorSpec) -> np.ndarray:
    value = np.asarray(value)
    want = np.dtype(spec.dtype)
    if value.dtype != want:
        if value.dtype.kind in "iub" and want.kind in "iu" and value.size:
            info = np.iinfo(want)
            if value.min() < info.min or value.max() > info.max:
                raise ValueError(f"input {spec.name!r} has values outside the range of {want.name}")
        value = value.astype(want)
    return np.ascontiguousarray(value)
