"""Which engine runs which file format: the one table that Session, the profiler (local and over
SSH), the demo and the version in every profile record read. Standard library only."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import metadata

__all__ = ["Engine", "ENGINES", "available", "installed", "packages", "version_of", "install_hint"]


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


# In order of preference: the first one installed runs the file.
ENGINES: dict[str, tuple[Engine, ...]] = {
    "onnx": (Engine("onnxruntime", None, ("onnxruntime", "onnxruntime-gpu")),),
    # ONNX Runtime's own format: what ONNX Runtime Mobile loads, and any onnxruntime build runs
    "ort": (Engine("onnxruntime", None, ("onnxruntime", "onnxruntime-gpu")),),
    "tflite": (
        Engine("ai_edge_litert.interpreter", "Interpreter", ("ai-edge-litert",)),
        Engine("tflite_runtime.interpreter", "Interpreter", ("tflite-runtime",)),
        # imports all of tensorflow: the workstation fallback
        Engine("tensorflow.lite", "Interpreter", ("tensorflow", "tensorflow-cpu")),
    ),
    "executorch": (
        # numpy in and out, no torch (albert_edge.runtime.pte_engine)
        Engine("executorch_numpy_runtime", "Runtime", ("executorch-numpy-runtime",)),
        # executorch's own bindings take torch tensors only, so they import torch: the workstation fallback
        Engine("executorch.extension.pybindings._C", None, ("executorch",)),
    ),
}


def packages(fmt: str) -> tuple[str, ...]:
    """The top-level packages that can run ``fmt`` files, in order of preference."""
    return tuple(engine.package for engine in ENGINES[fmt])


def installed(fmt: str) -> tuple[Engine, ...]:
    """The engines for ``fmt`` that are installed here (found, not imported)."""
    return tuple(e for e in ENGINES[fmt] if _found(e.package))


def available(fmt: str) -> bool:
    """Whether an engine for ``fmt`` is installed; looks no further than the first one found (a
    device with ai-edge-litert never even looks for tensorflow)."""
    return any(_found(e.package) for e in ENGINES[fmt])


def _found(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken install, or an import hook that refuses it
        return False


def version_of(package: str) -> str | None:
    """The installed version of an engine's package ("ai_edge_litert"), None when not installed."""
    for engine in (e for engines in ENGINES.values() for e in engines if e.package == package):
        for name in engine.distributions:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
    return None


def install_hint(formats: set[str]) -> str:
    """The pip command that installs the runtimes for ``formats`` (the package's extras)."""
    return f"pip install 'albert-edge[{','.join(sorted(formats))}]'"
