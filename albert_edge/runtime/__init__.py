"""Run an exported model file on the device: one small API over onnxruntime and the TFLite
interpreter. Imports neither torch nor tensorflow (tensorflow.lite only as the last resort for
.tflite files, when no standalone interpreter is installed)."""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from ..errors import RuntimeUnavailable, optional_import
from ..formats.graph import TensorSpec
from ..formats.tflite_check import check_tflite
from . import compiled, onnx_engine

__all__ = ["Session", "TensorSpec", "FORMATS", "format_of", "PROVIDERS", "DELEGATES"]

log = logging.getLogger(__name__)

# File suffix -> format name. Every model file albert-edge writes or runs is one of these.
FORMATS = {".onnx": "onnx", ".tflite": "tflite"}

# The TFLite interpreters we accept, in order of preference: (module, attribute holding the class).
_TFLITE_INTERPRETERS = (
    ("ai_edge_litert.interpreter", "Interpreter"),
    ("tflite_runtime.interpreter", "Interpreter"),
    ("tensorflow.lite", "Interpreter"),  # imports all of tensorflow: the workstation fallback
)
_SIGNATURE = "serving_default"

# onnxruntime execution providers by short name. CPU is the default; the others run only where the
# installed onnxruntime build has them (onnxruntime-gpu on a Jetson or a CUDA machine).
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
             "tensorrt": "TensorrtExecutionProvider"}
# TFLite: "xnnpack" keeps the interpreter's default XNNPACK delegate, "none" runs the builtin
# kernels only (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES).
DELEGATES = ("xnnpack", "none")

_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(bool)": "bool",
}


def format_of(path: str | os.PathLike) -> str:
    """'onnx' or 'tflite' from the file suffix; RuntimeUnavailable for anything else."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise RuntimeUnavailable(
            f"{path}: unknown model file type {suffix or '(no suffix)'!r}; expected {', '.join(FORMATS)}"
        )
    return FORMATS[suffix]


class Session:
    """A loaded model file. ``inputs``/``outputs`` describe its tensors; ``run`` takes numpy
    arrays by input name and returns numpy arrays by output name.

    Integer feeds are cast to the dtype the model wants (int64 for our ONNX files, int32 for
    TFLite). TFLite inputs are resized to the shape of each feed, so one file serves any batch
    size and sequence length.

    ``provider`` picks the onnxruntime execution provider ("cpu", "cuda", "tensorrt" or the full
    provider name; default CPU) and ``delegate`` the TFLite delegate ("xnnpack", the
    interpreter's default, or "none"); each applies only to its format. ``accelerator`` names what
    really runs the model: the first provider of the onnxruntime session, or the delegate.
    ``ops_trace`` (ONNX only) turns on onnxruntime's profiler, writing its JSON trace under that
    path prefix; ``end_profiling()`` stops it and returns the trace file.
    ``weights_once`` (TFLite with XNNPACK) runs the file through LiteRT's CompiledModel with
    XNNPACK's weight cache, so a weight shared by L layers is packed once instead of L times
    (see albert_edge.runtime.compiled); ``self.weights_once`` says whether that route is in use.
    """

    def __init__(self, path: str | os.PathLike, num_threads: int | None = None, provider: str | None = None,
                 delegate: str = "xnnpack", ops_trace: str | os.PathLike | None = None,
                 weights_once: bool = True):
        self.path = Path(path)
        if not self.path.is_file():
            raise RuntimeUnavailable(f"{self.path}: no such model file")
        self.format = format_of(self.path)
        self.num_threads = num_threads
        if self.format == "onnx":
            self._backend = _OnnxBackend(self.path, num_threads, provider, ops_trace)
        else:
            check_tflite(self.path)  # a damaged file can crash the interpreter, not just fail to load
            if ops_trace is not None:
                raise RuntimeUnavailable("per-operator tracing is offered for .onnx files only")
            self._backend = None
            if weights_once and delegate == "xnnpack":  # each shared weight packed once, not per layer
                self._backend = compiled.open_tflite(self.path, num_threads)
            if self._backend is None:
                self._backend = _TFLiteBackend(self.path, num_threads, delegate)
        self.weights_once: bool = isinstance(self._backend, compiled.CompiledTFLite)
        self.inputs: list[TensorSpec] = self._backend.inputs
        self.outputs: list[TensorSpec] = self._backend.outputs
        self.backend_name: str = self._backend.name
        self.accelerator: str = self._backend.accelerator

    def end_profiling(self) -> Path | None:
        """Stop onnxruntime's profiler and return its trace file (None when it was not on)."""
        end = getattr(self._backend, "end_profiling", None)
        return end() if end else None

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
        return {spec.name: _cast(feeds[spec.name], spec) for spec in self.inputs}

    def __repr__(self) -> str:
        return f"Session({str(self.path)!r}, backend={self.backend_name!r})"


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


class _OnnxBackend:
    name = "onnxruntime"

    def __init__(self, path: Path, num_threads: int | None, provider: str | None = None,
                 ops_trace: str | os.PathLike | None = None):
        try:
            ort = optional_import("onnxruntime")
        except ImportError:
            raise RuntimeUnavailable(
                "running .onnx files needs onnxruntime (pip install 'albert-edge[onnx]')"
            ) from None
        options = onnx_engine.session_options(ort, path, num_threads, provider, ops_trace)
        providers = ort_providers(provider, ort.get_available_providers())
        self._profiling = ops_trace is not None
        try:
            self._session = onnx_engine.inference_session(ort, path, options, providers)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise RuntimeUnavailable(f"{path}: onnxruntime cannot load it: {_first_line(exc)}") from None
        self.accelerator = self._session.get_providers()[0]
        self.inputs = [_ort_spec(a) for a in self._session.get_inputs()]
        self.outputs = [_ort_spec(a) for a in self._session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [s.name for s in self.outputs]
        return dict(zip(names, self._session.run(names, feeds)))

    def end_profiling(self) -> Path | None:
        if not self._profiling:
            return None
        self._profiling = False
        return Path(self._session.end_profiling())


def ort_providers(provider: str | None, available: list[str]) -> list[str]:
    """The provider list for onnxruntime: the one asked for, then CPU for the nodes it cannot run."""
    if provider is None:
        return ["CPUExecutionProvider"]
    full = PROVIDERS.get(provider.lower(), provider)
    if full not in PROVIDERS.values():
        raise RuntimeUnavailable(f"unknown execution provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    if full not in available:
        raise RuntimeUnavailable(f"execution provider {full} is not in this onnxruntime build (available: "
                                 f"{', '.join(available)}); install onnxruntime-gpu with CUDA/TensorRT for it")
    return list(dict.fromkeys([full, "CPUExecutionProvider"]))


def _ort_spec(arg) -> TensorSpec:
    shape = tuple(d if isinstance(d, (int, str)) else -1 for d in (arg.shape or ()))
    return TensorSpec(name=arg.name, dtype=_ORT_TYPES.get(arg.type, arg.type), shape=shape)


class _TFLiteBackend:
    def __init__(self, path: Path, num_threads: int | None, delegate: str = "xnnpack"):
        if delegate not in DELEGATES:
            raise RuntimeUnavailable(f"unknown TFLite delegate {delegate!r}; expected one of {', '.join(DELEGATES)}")
        interpreter_cls, self.name = _tflite_interpreter()
        self.accelerator = delegate
        extra = {}
        if delegate == "none":
            resolver = importlib.import_module(interpreter_cls.__module__).OpResolverType
            extra["experimental_op_resolver_type"] = resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        try:
            self._interpreter = interpreter_cls(model_path=str(path), num_threads=num_threads, **extra)
        except (ValueError, RuntimeError) as exc:
            raise RuntimeUnavailable(f"{path}: {self.name} cannot load it: {_first_line(exc)}"
                                     f"{_needs_newer_runtime(path, self.name)}") from None
        signatures = self._interpreter.get_signature_list()
        self._runner = None
        if signatures:
            key = _SIGNATURE if _SIGNATURE in signatures else next(iter(signatures))
            # The signature runner resizes its inputs to each feed's shape and re-allocates.
            self._runner = self._interpreter.get_signature_runner(key)
            details_in = self._runner.get_input_details()
            details_out = self._runner.get_output_details()
            self.inputs = [_tflite_spec(name, d) for name, d in details_in.items()]
            self.outputs = [_tflite_spec(name, d) for name, d in details_out.items()]
        else:
            self._interpreter.allocate_tensors()
            self._in = {d["name"]: d for d in self._interpreter.get_input_details()}
            self._out = {d["name"]: d for d in self._interpreter.get_output_details()}
            self.inputs = [_tflite_spec(n, d) for n, d in self._in.items()]
            self.outputs = [_tflite_spec(n, d) for n, d in self._out.items()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._runner is not None:
            result = self._runner(**feeds)
            return {s.name: np.array(result[s.name]) for s in self.outputs}
        interp = self._interpreter
        resized = False
        for name, value in feeds.items():
            detail = self._in[name]
            if tuple(interp.get_tensor(detail["index"]).shape) != value.shape:
                interp.resize_tensor_input(detail["index"], list(value.shape))
                resized = True
        if resized:
            interp.allocate_tensors()
        for name, value in feeds.items():
            interp.set_tensor(self._in[name]["index"], value)
        interp.invoke()
        return {s.name: np.array(interp.get_tensor(self._out[s.name]["index"])) for s in self.outputs}


def _needs_newer_runtime(path: Path, interpreter: str) -> str:
    """Why tflite-runtime (or tensorflow.lite, same numbering) refused ``path``, when the file's
    operator versions need a newer release than the one installed."""
    from ..formats.op_versions import min_runtime, op_versions, version_key

    if interpreter == "ai_edge_litert":  # numbered on its own, and newer than every table entry
        return ""
    try:
        installed = importlib.import_module(interpreter).__version__
        needed = min_runtime(op_versions(path))
        newer = needed is not None and version_key(needed) > version_key(installed.split("-")[0].split("rc")[0])
    except (ImportError, AttributeError, OSError, ValueError):
        return ""
    return (f" (its operators need TFLite runtime {needed}, {interpreter} is {installed}; "
            "`albert-edge quantize --tflite-compat 2.14` writes files tflite-runtime 2.14 loads)") if newer else ""


def _tflite_spec(name: str, detail: dict) -> TensorSpec:
    dims = detail.get("shape_signature")
    if dims is None or len(dims) == 0:
        dims = detail["shape"]
    return TensorSpec(name=name, dtype=np.dtype(detail["dtype"]).name, shape=tuple(int(d) for d in dims))


def _tflite_interpreter():
    for module_name, attr in _TFLITE_INTERPRETERS:
        try:
            module = optional_import(module_name)
        except ImportError:
            continue
        log.debug("TFLite interpreter: %s", module_name)
        return getattr(module, attr), module_name.split(".")[0]
    raise RuntimeUnavailable(
        "running .tflite files needs ai-edge-litert, tflite-runtime or tensorflow "
        "(pip install 'albert-edge[tflite]')"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
