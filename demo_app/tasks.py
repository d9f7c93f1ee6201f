"""Which engine answers the demo, and MediaPipe Tasks as one of them.

A ``.mediapipe.tflite`` file is a ``.tflite`` with TFLite metadata (task, labels, the sentencepiece
tokenizer inside). The demo runs it like any .tflite, through albert_edge.runtime.Session (LiteRT)
fed albert-edge's token ids; when asked, and where ``mediapipe`` is installed, MediaPipe's own
TextClassifier answers instead, a string in, as an app on a phone runs it. Every answer says
which engine gave it. mediapipe is imported only when it is used.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

from albert_edge.errors import AlbertEdgeError

__all__ = ["mediapipe_installed", "session_label", "MediaPipeClassifier", "RUNTIME_TITLES"]

# Session's backend (the runtime's top-level package) -> the name people know it by.
RUNTIME_TITLES = {"ai_edge_litert": "LiteRT", "tflite_runtime": "LiteRT (tflite-runtime)",
                  "tensorflow": "LiteRT (TensorFlow)", "onnxruntime": "ONNX Runtime",
                  "executorch_numpy_runtime": "ExecuTorch", "executorch": "ExecuTorch"}


def mediapipe_installed() -> bool:
    return importlib.util.find_spec("mediapipe") is not None


def session_label(backend_name: str) -> str:
    """'LiteRT via albert-edge Session': what answers when Session runs the file."""
    return f"{RUNTIME_TITLES.get(backend_name, backend_name)} via albert-edge Session"


class MediaPipeClassifier:
    """MediaPipe Tasks' TextClassifier on a file with TFLite metadata: text in, a score per label.
    Stands where a Session stands in the demo engine (path, backend_name, ...)."""

    backend_name = "mediapipe"
    label = "MediaPipe Tasks TextClassifier"
    weights_once = None  # MediaPipe's own interpreter: not measured here
    accelerator = "MediaPipe default (XNNPACK)"

    def __init__(self, path: str | os.PathLike, labels: list[str]):
        from mediapipe.tasks.python.core.base_options import BaseOptions
        from mediapipe.tasks.python.text import TextClassifier, TextClassifierOptions

        self.path = Path(path)
        self.labels = labels
        options = TextClassifierOptions(base_options=BaseOptions(model_asset_path=str(self.path)), max_results=-1)
        try:
            self._classifier = TextClassifier.create_from_options(options)
        except (RuntimeError, ValueError) as exc:
            raise AlbertEdgeError(f"MediaPipe's TextClassifier cannot load {self.path.name}: "
                                  f"{' '.join(str(exc).split())[:300]}") from None

    def log_scores(self, text: str) -> np.ndarray:
        """log(score) per label index: a softmax of it gives MediaPipe's scores back unchanged."""
        categories = self._classifier.classify(text).classifications[0].categories
        scores = np.zeros(len(self.labels))
        for c in categories:
            if c.index < len(scores):
                scores[c.index] = c.score
        with np.errstate(divide="ignore"):
            return np.log(scores)

    def version(self) -> str | None:
        from importlib import metadata

        try:
            return metadata.version("mediapipe")
        except metadata.PackageNotFoundError:
            return None
