"""Which engines are installed for a file format, and their versions: what Session, the profiler
(local and over SSH), the demo and the version in every profile record read. The engines of each
format are its entry's (:data:`albert_edge.formats.kinds.Format.engines`). Standard library only."""

from __future__ import annotations

import importlib.util
from importlib import metadata

from ..formats.kinds import EXECUTORCH, ONNX, ORT, TFLITE, Engine, Format, by_name
from ..errors import install_line

__all__ = ["Engine", "ENGINES", "engines_of", "available", "installed", "packages", "version_of", "install_hint"]


# Each Format's engines, by name: a view of the table in albert_edge.formats.kinds, and the one
# place this module reads them from (so that what is installed is looked up in one place).
ENGINES: dict[str, tuple[Engine, ...]] = {f.name: f.engines for f in (ONNX, ORT, TFLITE, EXECUTORCH)}


def engines_of(fmt: Format | str) -> tuple[Engine, ...]:
    """The engines that run ``fmt`` files (a Format, or its name), in order of preference."""
    return ENGINES[fmt.name if isinstance(fmt, Format) else by_name(fmt).name]


def packages(fmt: Format | str) -> tuple[str, ...]:
    """The top-level packages that can run ``fmt`` files, in order of preference."""
    return tuple(engine.package for engine in engines_of(fmt))


def installed(fmt: Format | str) -> tuple[Engine, ...]:
    """The engines for ``fmt`` that are installed here (found, not imported)."""
    return tuple(e for e in engines_of(fmt) if _found(e.package))


def available(fmt: Format | str) -> bool:
    """Whether an engine for ``fmt`` is installed; looks no further than the first one found (a
    device with ai-edge-litert never even looks for tensorflow)."""
    return any(_found(e.package) for e in engines_of(fmt))


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


def install_hint(formats: set[str] | set[Format]) -> str:
    """The pip command that installs the runtimes for ``formats`` (the package's extras, named
    as the formats are)."""
    return install_line(*sorted(f.name if isinstance(f, Format) else f for f in formats))
