"""MediaPipe's TextClassifier on an adaptive file (`convert --to mediapipe --adaptive`): from the raw
text it answers the class PyTorch's adaptive forward answers, and its second head's one category
scores the passes PyTorch stopped at; the int8 file keeps both heads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.exits import softmax
from albert_edge.formats.tflite_schema import Model

from .conftest import SEQ_LEN

ATOL = 1e-4


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory, classifier_checkpoint):
    """The topic classifier given exits that read each pass with its own final classifier (ALBERT's
    passes share one layer and one pooler), converted adaptive under a confidence rule at the median
    of the first pass's top probability on held-out texts, so that they stop at different passes.
    Returns (AdaptiveClassifier, file, checkpoint, texts)."""
    from albert_edge.converters.export import convert
    from albert_edge.converters.task_heads import AdaptiveClassifier
    from albert_edge.tokenizer import AlbertTokenizer
    from albert_edge.train.labelled import write_topic_dataset
    from albert_edge.train.state import export_model

    from ..exit_fixtures import classifier_with_exits, median_confidence_rule

    work = tmp_path_factory.mktemp("adaptive-mediapipe")
    model = classifier_with_exits(classifier_checkpoint)
    _, evaluate = write_topic_dataset(work / "topics")
    tok = AlbertTokenizer.from_dir(classifier_checkpoint)
    rows = [json.loads(line) for line in evaluate.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [r["text"] for r in rows if len(tok.encode(r["text"])) <= SEQ_LEN - 2][:40]
    rule = median_confidence_rule(model, tok, texts)
    path = export_model(model, work / "ckpt", classifier_checkpoint / "spiece.model")
    result = convert(str(path), work / "out", targets=("mediapipe",), seq_len=SEQ_LEN, adaptive=rule)
    return AdaptiveClassifier(model, rule).eval(), result.files[0].path, path, texts


def _classify(path, texts) -> list:
    from mediapipe.tasks.python.core.base_options import BaseOptions
    from mediapipe.tasks.python.text import TextClassifier, TextClassifierOptions

    options = TextClassifierOptions(base_options=BaseOptions(model_asset_path=str(path)), max_results=-1)
    with TextClassifier.create_from_options(options) as classifier:
        return [classifier.classify(t).classifications for t in texts]


def _pytorch(adaptive, checkpoint, texts) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's adaptive forward on albert-edge's ids, padded to the file's length as MediaPipe pads."""
    from albert_edge.tokenizer import AlbertTokenizer

    batch = AlbertTokenizer.from_dir(checkpoint)(texts, max_length=SEQ_LEN, padding="max_length", truncation=True)
    with torch.no_grad():
        logits, passes = adaptive(*(torch.tensor(batch[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
    return softmax(logits.numpy()), passes.numpy()


def test_text_classifier_answers_and_passes_are_pytorchs(adaptive):
    model, path, checkpoint, texts = adaptive
    buffer = path.read_bytes()
    assert Model.GetRootAs(buffer, 0).SubgraphsLength() == 1  # what MediaPipe's classifier takes: no WHILE
    probs, passes = _pytorch(model, checkpoint, texts)
    heads = _classify(path, texts)
    for row, (scores, ran) in enumerate(heads):
        assert (scores.head_name, ran.head_name) == ("probability", "passes")
        got = np.zeros(probs.shape[1])
        for c in scores.categories:
            got[c.index] = c.score
        np.testing.assert_allclose(got, probs[row], atol=ATOL)
        assert got.argmax() == probs[row].argmax()
        assert [(c.category_name, c.score) for c in ran.categories] == [("passes", float(passes[row]))]
    assert len(set(passes.tolist())) >= 2, f"every text ran {set(passes.tolist())} passes: the test shows nothing"


def test_int8_keeps_both_heads_through_mediapipe(adaptive):
    from albert_edge.converters.mediapipe_check import session_answers, task_answers
    from albert_edge.converters.quantized import quantize_file
    from albert_edge.quantize import QuantizeConfig

    _, path, checkpoint, texts = adaptive
    result = quantize_file(path, QuantizeConfig("int8-dynamic", tokenizer=checkpoint, calibration=("builtin",),
                                                num_samples=16, eval_samples=16))
    engine = task_answers(result.out_path, "TextClassifier", texts)
    session = session_answers(result.out_path, checkpoint, texts, SEQ_LEN, ("probabilities", "passes"))
    assert engine.shape == session.shape == (len(texts), 5)
    np.testing.assert_allclose(engine, session, atol=ATOL)  # class scores and the passes alike


def test_a_classifier_without_exits_is_refused_in_one_line(tmp_path, classifier_checkpoint):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(classifier_checkpoint), "--to", "mediapipe", "--adaptive",
                                       "--seq-len", str(SEQ_LEN), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "trained without early exits" in lines[0], result.output
    assert not out.exists()


def test_the_reports_note_says_where_the_passes_are(tmp_path, adaptive, classifier_file):
    from albert_edge.report import write_report

    path = adaptive[1]
    for folder, name, adaptive_file in ((path.parent, path.name, True),
                                        (classifier_file.path.parent, classifier_file.path.name, False)):
        report = write_report([folder], tmp_path / name / str(adaptive_file), charts=False)
        (group,) = report.data["snippets"]
        (entry,) = [e for e in group["files"] if e["name"] == name]
        assert ("classifications[1], has one category whose score is the passes" in entry["note"]) == adaptive_file
