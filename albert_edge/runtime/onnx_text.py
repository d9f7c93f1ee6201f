"""Running an ONNX file that takes the text itself (``albert-edge convert --to onnx-text``): its
tokenizer is an onnxruntime-extensions node (domain ``ai.onnx.contrib``), so the session needs the
extensions' custom-operator library registered, as an app registers it. Device side: onnxruntime
and onnxruntime-extensions only.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

from ..errors import RuntimeUnavailable, install_line, optional_import

__all__ = ["TEXT_INPUT", "IDS_OUTPUT", "DOMAIN", "EXTRA", "extensions_package", "extensions_library", "text_session", "run_text"]

TEXT_INPUT = "text"
IDS_OUTPUT = "token_ids"
DOMAIN = "ai.onnx.contrib"  # onnxruntime-extensions' custom operators
EXTRA = install_line("onnx-text")


def extensions_package():
    """The onnxruntime_extensions module; one line naming the extra when it is not installed."""
    try:
        return optional_import("onnxruntime_extensions")
    except ImportError:
        raise RuntimeUnavailable(f"files that take text run their tokenizer with onnxruntime-extensions: {EXTRA}") from None


def extensions_library() -> str:
    """The path of onnxruntime-extensions' custom-operator library, for
    ``SessionOptions.register_custom_ops_library``, found without importing the Python package:
    importing it adds much of the process's memory (it loads onnx and more), registering the
    library alone little, as an app's native library does.
    Refused in a process that has TensorFlow loaded, where registering it ends the process
    (segmentation fault, tensorflow 2.21)."""
    if "tensorflow" in sys.modules:
        raise RuntimeUnavailable("onnxruntime-extensions' library crashes a process that has TensorFlow loaded: "
                                 "run files that take text in a process without TensorFlow")
    try:
        spec = importlib.util.find_spec("onnxruntime_extensions")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            library = Path(folder) / f"_extensions_pydll{suffix}"
            if library.is_file():
                return str(library)
    return extensions_package().get_library_path()  # laid out otherwise: as the package says


def text_session(path: str | os.PathLike, num_threads: int | None = None):
    """An onnxruntime session of a text file, with the extensions' library registered (as an app
    registers it)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.register_custom_ops_library(extensions_library())
    if num_threads:
        options.intra_op_num_threads = num_threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_text(session, text: str) -> dict[str, np.ndarray]:
    """The file's outputs for one text, ``token_ids`` among them."""
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {TEXT_INPUT: np.array([text], dtype=object)})))
