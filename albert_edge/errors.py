"""The exceptions albert-edge raises for bad input, and the one line the CLI shows for each.

Every error a user can fix (a bad file, a wrong option, an output that cannot be written) ends
as one line on stderr and exit code 2; :func:`user_message` says which exceptions those are and
what the line reads. Anything else is a bug."""

from __future__ import annotations

import errno
import importlib
import json

__all__ = [
    "AlbertEdgeError", "ConfigError", "CheckpointError", "ConversionError", "TokenizerError",
    "RuntimeUnavailable", "OutputError", "DataError", "user_message", "first_line", "optional_import",
    "INSTALL_LINE", "install_line",
]


class AlbertEdgeError(Exception):
    """Base of every error caused by what the user gave us (not by a bug)."""


class ConfigError(AlbertEdgeError, ValueError):
    """A configuration is invalid or cannot be read; the message shows the values."""


class CheckpointError(AlbertEdgeError):
    """A checkpoint is missing, corrupt, or does not match its config."""


class ConversionError(AlbertEdgeError):
    """An export could not be made, or made a file that failed verification."""


class TokenizerError(AlbertEdgeError):
    """A tokenizer model is missing, unreadable or does not match the model."""


class RuntimeUnavailable(AlbertEdgeError):
    """No interpreter is installed for a model file's format."""


class OutputError(AlbertEdgeError):
    """An output cannot be written where it was asked for, or would replace a file without --force."""


class DataError(AlbertEdgeError, ValueError):
    """A corpus or labelled file is missing, empty, or cannot give training examples."""


# What to do about an operating-system error while reading or writing a path, by errno.
_OS_HINTS = {
    errno.ENOSPC: "the disk is full: free some space or write somewhere else",
    errno.EDQUOT: "the disk quota is used up: free some space or write somewhere else",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.EACCES: "permission denied: choose a path you can write to (or read)",
    errno.EPERM: "operation not permitted: choose a path you can write to (or read)",
    errno.EISDIR: "it is a directory: give a file path",
    errno.ENOTDIR: "a part of the path is a file, not a directory: choose another path",
    errno.ENOENT: "no such file or directory: check the path",
    errno.EEXIST: "it already exists: choose another path or remove it",
    errno.ENAMETOOLONG: "the name is too long: choose a shorter path",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n) and run again",
    errno.ENOTEMPTY: "the directory is not empty: choose another path or remove it",
}

# The extra that brings a package a command may import (pyproject.toml's optional dependencies):
# a device-side install that runs a build-side command lacks it.
_EXTRA_OF = {
    "torch": "convert", "tensorflow": "convert", "safetensors": "train", "huggingface_hub": "train",
    "onnx": "onnx", "onnxruntime": "onnx", "onnxruntime_extensions": "onnx-text", "ai_edge_litert": "tflite",
    "executorch": "convert-executorch", "matplotlib": "report", "starlette": "demo", "uvicorn": "demo",
}


def user_message(exc: BaseException) -> str | None:
    """The one line to show for ``exc`` when it is an error the user can fix, else None (a bug).

    AlbertEdgeError carries its own message. File-system errors name the path and what to do;
    a package of an extra that is not installed names the extra; text that is not UTF-8 and JSON
    that does not parse say so (the reader that knows the file
    name raises an AlbertEdgeError naming it instead)."""
    if isinstance(exc, AlbertEdgeError):
        return _one_line(str(exc)) or type(exc).__name__
    if isinstance(exc, OSError) and exc.errno in _OS_HINTS:
        paths = [p for p in (exc.filename, exc.filename2) if p is not None]
        where = f"{' -> '.join(str(p) for p in paths)}: " if paths else ""
        return f"{where}{_OS_HINTS[exc.errno]}"
    if isinstance(exc, UnicodeError):
        return f"input is not UTF-8 text ({_one_line(str(exc))}): convert it to UTF-8"
    if isinstance(exc, json.JSONDecodeError):
        return f"input is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if isinstance(exc, MemoryError):
        return "out of memory: use a smaller model, batch or sequence length"
    package = (getattr(exc, "name", None) or "").split(".")[0] if isinstance(exc, ModuleNotFoundError) else ""
    if package in _EXTRA_OF:
        return f"this command needs {package}, which is not installed: {install_line(_EXTRA_OF[package])}"
    return None


# albert-edge is not on the package index yet: every message, help text and page that says how to
# install an extra says it this way, from a clone (a wheel built from one takes the extras in place
# of '.'). The wording lives here only.
INSTALL_LINE = "pip install '.[{extras}]' -c constraints.txt (in a clone of albert-edge)"


def install_line(*extras: str) -> str:
    """How to install ``extras`` (names of the package's extras), as every message says it."""
    return INSTALL_LINE.format(extras=",".join(extras))


def _one_line(text: str) -> str:
    """Messages are one line: several lines of a library's message joined, never cut."""
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip())


def optional_import(name: str):
    """``importlib.import_module(name)`` for an optional dependency whose ImportError the caller
    turns into one line. A Ctrl-C or SIGTERM that lands while a compiled module initialises leaves
    the import as ImportError("initialization failed") with the interrupt as its cause (pybind11
    wraps it): that one is raised again as the interrupt it is, not reported as a missing package."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            raise exc.__cause__ from None
        raise


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when it has none): what a
    native library's multi-line error contributes to our one-line message."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
