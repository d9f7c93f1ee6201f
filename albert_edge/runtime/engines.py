"""Which engine runs which file format: the one table that Session, the profiler (local and over
SSH), the demo and the version in every profile record read. Standard library only."""

from __future__ import annotations

import importlib.util
from importlib import metadata

from ..formats.kinds import EXECUTORCH, ONNX, ORT, TFLITE, Engine

__all__ = ["Engine", "ENGINES", "available", "installed", "packages", "version_of", "install_hint"]


# In order of preference: the first one installed runs the file (each Format's engines, by name).
ENGINES: dict[str, tuple[Engine, ...]] = {f.name: f.engines for f in (ONNX, ORT, TFLITE, EXECUTORCH)}


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
