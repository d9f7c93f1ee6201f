"""Running an ONNX file that takes the text itself (``albert-edge convert --to onnx-text``): its
tokenizer is an onnxruntime-extensions node (domain ``ai.onnx.contrib``), so the session needs the
extensions' custom-operator library registered, as an app registers it. Device side: onnxruntime
and onnxruntime-extensions only.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import RuntimeUnavailable, optional_import

__all__ = ["TEXT_INPUT", "IDS_OUTPUT", "DOMAIN", "EXTRA", "extensions_library", "text_session", "run_text"]

TEXT_INPUT = "text"
IDS_OUTPUT = "token_ids"
DOMAIN = "ai.onnx.contrib"  # onnxruntime-extensions' custom operators
EXTRA = "pip install 'albert-edge[onnx-text]' (onnxruntime-extensions)"


def extensions_library() -> str:
    """The path of onnxruntime-extensions' custom-operator library, for
    ``SessionOptions.register_custom_ops_library``."""
    try:
        extensions = optional_import("onnxruntime_extensions")
    except ImportError:
        raise RuntimeUnavailable(f"files that take text run their tokenizer with onnxruntime-extensions: {EXTRA}") from None
    return extensions.get_library_path()


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
