"""convert --to mediapipe: the file MediaPipe's own TextClassifier and TextEmbedder load as an app
does, answering raw text as albert_edge.runtime and PyTorch do, each weight stored once."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from albert_edge import checkpoints
from albert_edge.converters.mediapipe_check import TASK_TEXTS, agreement, session_answers, task_answers
from albert_edge.formats.weights import analyze, read_file
from albert_edge.tokenizer import AlbertTokenizer

SEQ_LEN = 32  # the files' length (tests/mobile/conftest.py)


def _pytorch(model, checkpoint, texts, seq_len=SEQ_LEN) -> np.ndarray:
    tok = AlbertTokenizer.from_dir(checkpoint)
    rows = []
    with torch.no_grad():
        for t in texts:
            feeds = tok([t], max_length=seq_len, padding="max_length", truncation=True)
            rows.append(model(*(torch.from_numpy(feeds[n]) for n in ("input_ids", "attention_mask",
                                                                      "token_type_ids"))).numpy().reshape(-1))
    return np.stack(rows).astype(np.float64)


def test_classifier_answers_through_mediapipe(classifier_file, classifier_checkpoint):
    from albert_edge.converters.mediapipe import file_model

    path = classifier_file.path
    engine = task_answers(path, "TextClassifier", TASK_TEXTS)
    session = session_answers(path, classifier_checkpoint, TASK_TEXTS, SEQ_LEN)
    _, model = checkpoints.load_model(classifier_checkpoint, None)
    reference = _pytorch(file_model(model.eval()), classifier_checkpoint, TASK_TEXTS)
    assert engine.shape == (len(TASK_TEXTS), 4)
    np.testing.assert_allclose(engine.sum(1), 1.0, atol=1e-5)  # probabilities, not logits
    assert agreement("TextClassifier", engine, session)["max_abs_diff"] <= 1e-4
    assert np.abs(session - reference).max() <= 1e-4
    assert np.abs(engine - reference).max() <= 1e-4


def test_classifier_labels_are_the_checkpoints(classifier_file, classifier_checkpoint):
    from mediapipe.tasks.python.core.base_options import BaseOptions
    from mediapipe.tasks.python.text import TextClassifier, TextClassifierOptions

    config, _ = checkpoints.load_model(classifier_checkpoint, None)
    options = TextClassifierOptions(base_options=BaseOptions(model_asset_path=str(classifier_file.path)))
    with TextClassifier.create_from_options(options) as classifier:
        categories = classifier.classify(TASK_TEXTS[0]).classifications[0].categories
    assert {c.index: c.category_name for c in categories} == dict(enumerate(config.label_names))


def test_embedder_answers_through_mediapipe(embedder_file, base_checkpoint):
    from albert_edge.converters.mediapipe import file_model

    path = embedder_file.path
    engine = task_answers(path, "TextEmbedder", TASK_TEXTS)
    session = session_answers(path, base_checkpoint, TASK_TEXTS, SEQ_LEN)
    _, model = checkpoints.load_model(base_checkpoint, None)
    wrapped = file_model(model.eval())
    assert wrapped.vector == "pooled"
    reference = _pytorch(wrapped, base_checkpoint, TASK_TEXTS)
    assert engine.shape == (len(TASK_TEXTS), model.config.hidden_size)
    assert agreement("TextEmbedder", engine, session)["min_cosine"] >= 0.9999
    assert agreement("TextEmbedder", engine, reference)["min_cosine"] >= 0.9999
    assert np.abs(session - reference).max() <= 1e-4


@pytest.mark.parametrize("which", ["classifier_file", "embedder_file"])
def test_metadata_stores_no_weight_twice(which, request):
    converted = request.getfixturevalue(which)
    contents = read_file(converted.path)
    report = converted.report.weights
    assert report.ok and not report.duplicates
    # Read back from the file, not taken from the conversion's report.
    again = analyze(contents, None)
    assert not again.duplicates
    assert report.stored_bytes == again.stored_bytes <= 1.01 * report.unique_bytes


def test_inputs_are_fixed_length_int32(classifier_file):
    contents = read_file(classifier_file.path)
    assert sorted(s.name for s in contents.inputs) == ["attention_mask", "input_ids", "token_type_ids"]
    assert {(s.dtype, tuple(s.shape)) for s in contents.inputs} == {("int32", (1, SEQ_LEN))}
