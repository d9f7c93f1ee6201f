"""The TFLite Task Library's BertNLClassifier (tflite-support 0.4.4: the same C++ as Android's
``org.tensorflow.lite.task.text.nlclassifier.BertNLClassifier`` and iOS's ``TFLBertNLClassifier``)
loads the classifier file ``convert --to mediapipe`` writes, fp32 and int8, as it is, and answers
raw text as MediaPipe's TextClassifier does on the same file.

tflite-support needs protobuf < 4, which mediapipe 0.10.21 refuses, so it runs in an environment
of its own: ``ALBERT_EDGE_TASKLIB_PYTHON`` names its Python (.ci/mobile.sh builds it, with
libusb found for tflite-support's library). Without it these tests skip, saying so."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from albert_edge.converters.mediapipe_check import task_answers
from albert_edge.converters.quantized import quantize_file
from albert_edge.quantize import QuantizeConfig
from albert_edge.train.labelled import write_topic_dataset

TASKLIB_PYTHON = os.environ.get("ALBERT_EDGE_TASKLIB_PYTHON")
pytestmark = pytest.mark.skipif(not TASKLIB_PYTHON, reason="ALBERT_EDGE_TASKLIB_PYTHON is not set: .ci/mobile.sh "
                                "builds the tflite-support environment the Task Library runs in")

# In the Task Library's environment: one file, the texts in a JSON file, each text's scores by
# label out as JSON lines. Any crash (the output name it looks up missing is a segmentation fault)
# ends the child with a non-zero status.
_CLASSIFY = """
import json, sys
from tflite_support.task import text
classifier = text.BertNLClassifier.create_from_file(sys.argv[1])
for line in json.load(open(sys.argv[2], encoding="utf-8")):
    categories = classifier.classify(line).classifications[0].categories
    print(json.dumps({c.category_name: c.score for c in categories}))
"""


def _held_out_texts(tmp_path, count: int = 200) -> list[str]:
    """Held-out paragraphs of the topic set the classifier was fine-tuned on (not trained on)."""
    _, evaluate = write_topic_dataset(tmp_path / "topics")
    rows = [json.loads(line) for line in evaluate.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [row["text"] for row in rows][:count]
    assert len(texts) == count
    return texts


def _task_library(path, texts, tmp_path) -> list[dict[str, float]]:
    given = tmp_path / "texts.json"
    given.write_text(json.dumps(texts), encoding="utf-8")
    done = subprocess.run([TASKLIB_PYTHON, "-c", _CLASSIFY, str(path), str(given)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("scheme", ["fp32", "int8-dynamic"])
def test_bert_nl_classifier_answers_as_mediapipe(scheme, classifier_file, classifier_checkpoint, tmp_path):
    from albert_edge.formats.tflite_metadata import read_metadata

    path = classifier_file.path
    if scheme != "fp32":
        path = quantize_file(path, QuantizeConfig(scheme, tokenizer=classifier_checkpoint),
                        tmp_path / f"model.mediapipe.{scheme}.tflite").out_path
    labels = read_metadata(path).labels
    texts = _held_out_texts(tmp_path)
    got = _task_library(path, texts, tmp_path)
    assert len(got) == len(texts)
    assert all(sorted(row) == sorted(labels) for row in got)
    library = np.array([[row[label] for label in labels] for row in got])
    mediapipe = task_answers(path, "TextClassifier", texts)
    # Both run the same file's graph on the same ids (MediaPipe's tokenizer and the Task Library's are
    # one C++ SentencePiece front end), in two TFLite builds whose int8 kernels round the dynamically
    # quantized activations apart: measured at most 2.1e-7 (fp32) and 1.6e-4 (int8) over 200 texts.
    assert np.abs(library - mediapipe).max() <= (1e-5 if scheme == "fp32" else 1e-3)
    assert (library.argmax(1) == mediapipe.argmax(1)).mean() >= 0.99
