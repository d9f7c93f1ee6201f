"""quantize of a MediaPipe file: the int8 file keeps the metadata (task, tokenizer, labels), and
MediaPipe's TextClassifier on it picks the class albert_edge.runtime's Session picks on it."""

from __future__ import annotations

from albert_edge.converters.mediapipe_check import session_answers, task_answers
from albert_edge.formats.tflite_metadata import read_metadata
from albert_edge.formats.weights import read_file
from albert_edge.converters.quantized import quantize_file
from albert_edge.quantize import QuantizeConfig
from albert_edge.text import builtin_corpus_path, split_sentences

SEQ_LEN = 32  # the files' length (tests/mobile/conftest.py)


def test_int8_keeps_metadata_and_agrees_through_mediapipe(classifier_file, classifier_checkpoint):
    result = quantize_file(classifier_file.path, QuantizeConfig("int8-dynamic", tokenizer=classifier_checkpoint,
                                                           calibration=("builtin",), num_samples=16, eval_samples=16))
    int8 = result.out_path
    parent, kept = read_metadata(classifier_file.path), read_metadata(int8)
    assert kept is not None and kept.to_dict() == parent.to_dict()
    assert kept.task == "TextClassifier" and kept.tokenizer_embedded and len(kept.labels) == 4
    contents = read_file(int8)
    assert "int8" in {w.data.dtype.name for w in contents.weights}  # matrices really are int8
    assert {(s.dtype, tuple(s.shape)) for s in contents.inputs} == {("int32", (1, SEQ_LEN))}

    lines = builtin_corpus_path().read_text(encoding="utf-8").splitlines()
    texts = [s for line in lines[:400] for s in split_sentences(line) if len(s.split()) >= 4][:200]
    assert len(texts) == 200
    engine = task_answers(int8, "TextClassifier", texts)
    session = session_answers(int8, classifier_checkpoint, texts, SEQ_LEN)
    assert len(set(session.argmax(1))) >= 2  # a classifier that answers, not one constant class
    agreement = float((engine.argmax(1) == session.argmax(1)).mean())
    assert agreement >= 0.99, agreement
