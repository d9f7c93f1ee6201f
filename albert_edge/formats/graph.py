"""What an exported file holds, read back from disk: the common ground of the ONNX and TFLite
readers and of the weights-once analysis. Readers import no torch and no tensorflow."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

__all__ = ["TensorSpec", "StoredTensor", "GraphContents", "INPUT_NAMES", "LAYER_FORMS", "DEFAULT_LAYER_FORM"]

# The inputs of every albert-edge model file, in the order the PyTorch model takes them.
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")

# How a TFLite file writes the repeated applications of ALBERT's shared layer: each application's
# operators in sequence ("unrolled"), or each run of applications of one weight group as a WHILE
# operator over a body subgraph that holds the group once ("loop"). Both store each weight once;
# the loop also keeps a runtime that prepares weights per operator - the TFLite Interpreter's
# XNNPACK delegate under default options, as apps open a file - from packing the shared weights
# once per application (benchmarks/peers.py measures both forms in the Interpreter).
# tflite_reader.layer_form tells a file's.
LAYER_FORMS = ("unrolled", "loop")
# What `convert --to tflite` writes unless told: what an app's Interpreter runs leanest. The
# mediapipe target stays unrolled (MediaPipe's text tasks take one subgraph), and so do
# quantize's int8-full and int16x8 (their rewrites read one graph).
DEFAULT_LAYER_FORM = "loop"


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: name, numpy dtype name, shape (-1 or a name for dynamic axes)."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]


@dataclass(frozen=True)
class StoredTensor:
    """One constant stored in the file, once per stored buffer (two tensors pointing at the same
    TFLite buffer are one StoredTensor). ``data`` holds the stored values (read-only)."""

    name: str
    data: np.ndarray
    consumers: tuple[str, ...] = ()  # op types (or op names) that read it, for reporting

    @property
    def dtype(self) -> str:
        return self.data.dtype.name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


@dataclass
class GraphContents:
    format: str  # "onnx", "ort", "tflite" or "executorch"
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    ops: Counter = field(default_factory=Counter)  # op type -> count
    weights: list[StoredTensor] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)  # opset / schema version, producer, ...

    @property
    def stored_weight_bytes(self) -> int:
        return sum(w.nbytes for w in self.weights)
