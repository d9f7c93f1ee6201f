"""The demo serving a MediaPipe file: with --mediapipe, MediaPipe Tasks' TextClassifier answers (a
string in), without it LiteRT through albert-edge's Session; each answer names its engine and the
two agree."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from albert_edge.converters.mediapipe_check import TASK_TEXTS, task_answers

TEXT = TASK_TEXTS[0]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, classifier_file, classifier_checkpoint, spiece_model, seq_len):
    """A demo bundle holding only the fine-tuned classifier's MediaPipe file (its conversion
    directory, manifest included, as the classifier folder), with its labels and tokenizer. Made
    by hand: `demo bundle` needs onnx, which this environment does not have."""
    out = tmp_path_factory.mktemp("demo-mediapipe") / "bundle"
    shutil.copytree(classifier_file.path.parent, out / "classifier")
    shutil.copyfile(spiece_model, out / "spiece.model")
    id2label = json.loads((classifier_checkpoint / "config.json").read_text())["id2label"]
    (out / "labels.json").write_text(json.dumps([id2label[str(i)] for i in range(len(id2label))]))
    (out / "bundle.json").write_text(json.dumps({"seq_len": seq_len}))
    assert (out / "classifier" / "model.mediapipe.tflite").is_file()
    return out


def test_mediapipe_answers_with_a_string_and_says_so(bundle, classifier_file):
    from albert_edge.demo.engine import Bundle, Engine

    engine = Engine(Bundle(bundle), "mediapipe-fp32", num_threads=1, mediapipe=True)
    result = engine.classify(TEXT)
    assert result["engine"] == "MediaPipe Tasks TextClassifier" and result["model"] == "mediapipe-fp32"
    status = engine.status()["models"]["classifier"]
    assert status["engine"] == result["engine"] and status["runtime"] == "mediapipe" and status["runtime_version"]
    # The scores are MediaPipe's own, label by label.
    expected = task_answers(classifier_file.path, "TextClassifier", [TEXT])[0]
    got = {s["label"]: s["score"] for s in result["scores"]}
    assert np.allclose([got[label] for label in engine.bundle.labels], expected, atol=1e-4)


def test_without_the_flag_litert_answers_the_same(bundle):
    from albert_edge.demo.engine import Bundle, Engine

    by_session = Engine(Bundle(bundle), "mediapipe-fp32", num_threads=1).classify(TEXT)
    by_mediapipe = Engine(Bundle(bundle), "mediapipe-fp32", num_threads=1, mediapipe=True).classify(TEXT)
    assert by_session["engine"] == "LiteRT via albert-edge Session"
    assert by_session["label"] == by_mediapipe["label"]
    session = {s["label"]: s["score"] for s in by_session["scores"]}
    for s in by_mediapipe["scores"]:
        assert abs(session[s["label"]] - s["score"]) < 0.02  # albert-edge's tokenizer against the file's own
