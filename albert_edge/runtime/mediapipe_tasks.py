"""MediaPipe Tasks as a runtime: a file with TFLite metadata (``convert --to mediapipe``: task,
labels, the sentencepiece tokenizer inside) run by MediaPipe's own text task, a string in, as an
app on a phone runs it. mediapipe is imported only when it is used. Device side.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

from ..errors import AlbertEdgeError

__all__ = ["mediapipe_installed", "MediaPipeClassifier"]


def mediapipe_installed() -> bool:
    return importlib.util.find_spec("mediapipe") is not None


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
