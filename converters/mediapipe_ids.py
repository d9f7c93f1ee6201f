"""The ids MediaPipe's own text pre-processing gives a text, recovered through its TextClassifier.

MediaPipe exposes no tokenizer: its BERT pre-processing (lower-casing ASCII, the embedded
sentencepiece model, [CLS] ... [SEP], truncation and padding to the model's length) runs inside
the task graph. So a probe model is built whose one output is its inputs as floats,
``(input_ids, attention_mask, token_type_ids)`` side by side, and given MediaPipe metadata with the
spiece.model under test; MediaPipe's TextClassifier reports each output value as the score of
one "class", which gives back the ids it fed. Build side: needs tensorflow and mediapipe.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .mediapipe_check import task_answers

__all__ = ["engine_ids", "probe_model"]


def probe_model(seq_len: int) -> bytes:
    """A .tflite whose output (1, 3 * seq_len) float is its three int32 (1, seq_len) inputs."""
    from .native_logs import quiet_tensorflow_env

    quiet_tensorflow_env()  # before TensorFlow loads; a level the user set is kept
    import tensorflow as tf

    spec = [tf.TensorSpec([1, seq_len], tf.int32, name=n) for n in ("input_ids", "attention_mask", "token_type_ids")]

    @tf.function(input_signature=spec)
    def echo(input_ids, attention_mask, token_type_ids):
        return tf.cast(tf.concat([input_ids, attention_mask, token_type_ids], axis=1), tf.float32)

    converter = tf.lite.TFLiteConverter.from_concrete_functions([echo.get_concrete_function()], echo)
    return converter.convert()


def engine_ids(spiece: str | os.PathLike, texts: Sequence[str], seq_len: int = 256) -> list[list[int]]:
    """For each text, the ids MediaPipe feeds a model whose metadata embeds ``spiece`` (a
    spiece.model file, used as it is): [CLS], the pieces, [SEP], without the padding."""
    from .mediapipe import _input_tensor_names, classifier_metadata, writers

    writer = writers()
    buffer = probe_model(seq_len)
    names = _input_tensor_names(buffer)
    with tempfile.TemporaryDirectory(prefix="albert-edge-probe-") as tmp:
        model = Path(tmp) / "spiece.model"
        model.write_bytes(Path(spiece).read_bytes())
        made = classifier_metadata(writer, buffer, writer.SentencePieceTokenizer(str(model)),
                                   [f"v{i}" for i in range(3 * seq_len)], names)
        probe = Path(tmp) / "probe.tflite"
        probe.write_bytes(made.populate()[0])
        values = np.rint(task_answers(probe, "TextClassifier", texts)).astype(np.int64)
    ids, mask = values[:, :seq_len], values[:, seq_len:2 * seq_len]
    return [row[m == 1].tolist() for row, m in zip(ids, mask)]
