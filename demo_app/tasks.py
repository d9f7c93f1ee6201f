"""Which engine answers the demo, and MediaPipe Tasks as one of them.

A ``.mediapipe.tflite`` file is a ``.tflite`` with TFLite metadata (task, labels, the sentencepiece
tokenizer inside). The demo runs it like any .tflite, through albert_edge.runtime.Session (LiteRT)
fed albert-edge's token ids; when asked, and where ``mediapipe`` is installed, MediaPipe's own
TextClassifier answers instead, a string in, as an app on a phone runs it. Every answer says
which engine gave it. mediapipe is imported only when it is used.
"""

from __future__ import annotations

from albert_edge.runtime.mediapipe_tasks import MediaPipeClassifier, mediapipe_installed

__all__ = ["mediapipe_installed", "session_label", "MediaPipeClassifier", "RUNTIME_TITLES"]

# Session's backend (the runtime's top-level package) -> the name people know it by.
RUNTIME_TITLES = {"ai_edge_litert": "LiteRT", "tflite_runtime": "LiteRT (tflite-runtime)",
                  "tensorflow": "LiteRT (TensorFlow)", "onnxruntime": "ONNX Runtime",
                  "executorch_numpy_runtime": "ExecuTorch", "executorch": "ExecuTorch"}


def session_label(backend_name: str) -> str:
    """'LiteRT via albert-edge Session': what answers when Session runs the file."""
    return f"{RUNTIME_TITLES.get(backend_name, backend_name)} via albert-edge Session"
