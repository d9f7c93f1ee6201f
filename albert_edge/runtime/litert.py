"""How albert_edge.runtime runs a .tflite file in the classic TFLite ``Interpreter``: the route for
every file when XNNPACK is off, and when the weights-once route (:mod:`.compiled`) is declined.
Imports no tensorflow unless it is the only interpreter installed."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np

from ..errors import RuntimeUnavailable, first_line, install_line, optional_import
from ..formats.graph import TensorSpec
from ..exits import SETTING
from ..formats.tflite_reader import SETTING_SIGNATURE, layer_form
from ..formats.kinds import TFLITE
from .engines import engines_of

__all__ = ["InterpreterBackend", "DELEGATES", "tflite_interpreter"]

log = logging.getLogger(__name__)

_SIGNATURE = "serving_default"

# TFLite: "xnnpack" keeps the interpreter's default XNNPACK delegate, "none" runs the builtin
# kernels only (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES).
DELEGATES = ("xnnpack", "none")


class InterpreterBackend:
    """A .tflite file in the classic TFLite ``Interpreter`` (ai-edge-litert, tflite-runtime or
    tensorflow.lite, whichever is installed first of the TFLite format's engines)."""


    def __init__(self, path: Path, num_threads: int | None, delegate: str = "xnnpack"):
        if delegate not in DELEGATES:
            raise RuntimeUnavailable(f"unknown TFLite delegate {delegate!r}; expected one of {', '.join(DELEGATES)}")
        interpreter_cls, self.name = tflite_interpreter()
        self.accelerator = delegate
        # XNNPACK packs weights per operator: each shared weight once where the layers are one WHILE body
        self.weights_once = delegate == "xnnpack" and layer_form(path) == "loop"
        extra = {}
        if delegate == "none":
            resolver = sys.modules[interpreter_cls.__module__].OpResolverType  # imported with the class
            extra["experimental_op_resolver_type"] = resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        try:
            self._interpreter = interpreter_cls(model_path=str(path), num_threads=num_threads, **extra)
        except (ValueError, RuntimeError) as exc:
            raise RuntimeUnavailable(f"{path}: {self.name} cannot load it: {first_line(exc)}"
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
            if SETTING_SIGNATURE in signatures:  # an adaptive file (convert --adaptive)
                self._setter = self._interpreter.get_signature_runner(SETTING_SIGNATURE)
        else:
            self._interpreter.allocate_tensors()
            self._in = {d["name"]: d for d in self._interpreter.get_input_details()}
            self._out = {d["name"]: d for d in self._interpreter.get_output_details()}
            self.inputs = [_tflite_spec(n, d) for n, d in self._in.items()]
            self.outputs = [_tflite_spec(n, d) for n, d in self._out.items()]

    _setter = None

    def set_exit_setting(self, value: float) -> float:
        """The file's exit setting from the next run on (its SETTING_SIGNATURE, which keeps the
        setting as it was when ``value`` is outside the rule's range: then ValueError)."""
        if self._setter is None:
            raise ValueError("it is not adaptive (convert --adaptive): it has no exit setting")
        wanted = np.float32(value)
        kept = np.float32(self._setter(**{SETTING: wanted})[SETTING])
        if kept != wanted:
            raise ValueError(f"exit setting {value:g} is outside the range of its exit rule; it stays {kept:g}")
        return float(kept)

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
        installed = optional_import(interpreter).__version__
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


def tflite_interpreter():
    """The first installed TFLite ``Interpreter`` class and the package it comes from."""
    for engine in engines_of(TFLITE):
        try:
            module = optional_import(engine.module)
        except ImportError:
            continue
        log.debug("TFLite interpreter: %s", engine.module)
        return getattr(module, engine.attribute), engine.package
    raise RuntimeUnavailable(
        "running .tflite files needs ai-edge-litert, tflite-runtime or tensorflow "
        f"({install_line('tflite')})"
    )
