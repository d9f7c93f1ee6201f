"""MediaPipe Tasks as a runtime: a file with TFLite metadata (``convert --to mediapipe``: task,
labels, the sentencepiece tokenizer inside) run by MediaPipe's own text task, a string in, as an
app on a phone runs it. mediapipe is imported only when it is used. Device side.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

from ..errors import AlbertEdgeError, RuntimeUnavailable, install_line, optional_import
from ..formats.graph import TensorSpec
from .onnx_text import TEXT_INPUT

__all__ = ["mediapipe_installed", "MediaPipeTask", "MediaPipeClassifier", "MOBILE_EXTRA"]

MOBILE_EXTRA = install_line("mobile")


def mediapipe_installed() -> bool:
    return importlib.util.find_spec("mediapipe") is not None


class MediaPipeTask:
    """MediaPipe Tasks' ``TextClassifier`` or ``TextEmbedder`` (``task``, as the file's metadata
    says) on a file with TFLite metadata, the text in: ``answer(text)`` is the score per label index
    or the embedding. Stands where a Session stands in the profiler (``takes_text``, ``inputs``,
    ``run``, ``prepare``): one text per call, ``{"text": np.array([text], dtype=object)}``.
    MediaPipe's Python API sets no thread count; its interpreter uses its own default."""

    backend_name = "mediapipe"
    format = "tflite"
    accelerator = "xnnpack"  # MediaPipe's CPU inference runs through XNNPACK
    weights_once = None  # MediaPipe's own interpreter: not measured here
    takes_text = True

    def __init__(self, path: str | os.PathLike, task: str):
        self.path = Path(path)
        self.task = task
        text, core = self.modules()
        base = core.BaseOptions(model_asset_path=str(self.path))
        try:
            if task == "TextClassifier":
                self._task = text.TextClassifier.create_from_options(
                    text.TextClassifierOptions(base_options=base, max_results=-1))
            elif task == "TextEmbedder":
                self._task = text.TextEmbedder.create_from_options(text.TextEmbedderOptions(base_options=base))
            else:
                raise ValueError(f"its metadata describes no text task MediaPipe runs ({task})")
        except (RuntimeError, ValueError) as exc:
            raise AlbertEdgeError(f"MediaPipe's {task} cannot load {self.path.name}: "
                                  f"{' '.join(str(exc).split())[:300]}") from None
        output = "scores" if task == "TextClassifier" else "embedding"
        self.inputs = [TensorSpec(TEXT_INPUT, "object", (1,))]
        self.outputs = [TensorSpec(output, "float32", (1, -1))]

    @staticmethod
    def modules():
        """MediaPipe's text tasks and base options modules (imported once; mediapipe 0.10.21's imports
        TensorFlow where it is installed, much of the process's memory before any file loads)."""
        try:
            return (optional_import("mediapipe.tasks.python.text"),
                    optional_import("mediapipe.tasks.python.core.base_options"))
        except ImportError as exc:
            raise RuntimeUnavailable(f"running a file through MediaPipe Tasks needs mediapipe ({exc.name or exc} did "
                                     f"not import): {MOBILE_EXTRA}") from None

    def answer(self, text: str) -> np.ndarray:
        if self.task == "TextEmbedder":
            return np.asarray(self._task.embed(text).embeddings[0].embedding, dtype=np.float32)
        categories = self._task.classify(text).classifications[0].categories
        scores = np.zeros(len(categories), dtype=np.float32)
        for c in categories:
            scores[c.index] = c.score
        return scores

    def run(self, feeds) -> dict[str, np.ndarray]:
        return self.prepare(feeds)()

    def prepare(self, feeds):
        text = str(np.asarray(feeds[TEXT_INPUT]).reshape(-1)[0])
        name, answer = self.outputs[0].name, self.answer
        return lambda: {name: answer(text)[None]}

    @staticmethod
    def version() -> str | None:
        from importlib import metadata

        try:
            return metadata.version("mediapipe")
        except metadata.PackageNotFoundError:
            return None


class MediaPipeClassifier(MediaPipeTask):
    """MediaPipe Tasks' TextClassifier on a file with TFLite metadata: text in, a score per label.
    Stands where a Session stands in the demo engine (path, backend_name, ...)."""

    label = "MediaPipe Tasks TextClassifier"
    accelerator = "MediaPipe default (XNNPACK)"

    def __init__(self, path: str | os.PathLike, labels: list[str]):
        super().__init__(path, "TextClassifier")
        self.labels = labels

    def log_scores(self, text: str) -> np.ndarray:
        """log(score) per label index: a softmax of it gives MediaPipe's scores back unchanged."""
        scores = np.zeros(len(self.labels))
        given = self.answer(text)[: len(scores)]
        scores[: len(given)] = given
        with np.errstate(divide="ignore"):
            return np.log(scores)
