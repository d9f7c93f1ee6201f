"""One validation of a classifier's labels (albert_edge.labels), and the places that use it:
convert --to mediapipe (before MediaPipe is needed, so it runs here without it) and a MediaPipe
file's packed labels as inspect and the report read them. A demo bundle's labels.json:
tests/demo/test_bundle_check.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from albert_edge import checkpoints
from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.labels import CONFIG_FIX, LabelError, check_labels, check_task_labels
from albert_edge.model import build_model

TINY = AlbertConfig.preset("tiny").replace(vocab_size=400)  # the size of the shared spiece_model
SCRIPT = Path(sys.executable).with_name("albert-edge")

BAD = {
    "empty": (["a", "", "c"], "label 1 is empty ('')"),
    "blank": (["a", "  ", "c"], "label 1 is empty ('  ')"),
    "duplicate": (["a", "b", "a"], "names 'a' more than once (labels 0 and 2)"),
    "newline": (["a", "b\nc", "d"], "label 1 ('b\\nc') holds a line break"),
    "carriage-return": (["a", "b\rc", "d"], "label 1 ('b\\rc') holds a line break"),
    "number": (["a", 5, "c"], "label 1 is 5, not a string"),
    "null": (["a", None, "c"], "label 1 is null, not a string"),
    "list": (["a", ["x"], "c"], 'label 1 is ["x"], not a string'),
    "too-few": (["a", "b"], "names 2 labels but the classifier has 3 output classes"),
    "too-many": (["a", "b", "c", "d"], "names 4 labels but the classifier has 3 output classes"),
    "none": ([], "names no label"),
    "placeholders": (["LABEL_0", "LABEL_1", "LABEL_2"], "only placeholders (LABEL_0, LABEL_1, ...)"),
}


def one_line(result, message: str) -> str:
    text = result.output + (result.stderr or "")
    assert "Traceback" not in text, text
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, text)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert message in lines[0], (message, lines[0])
    return lines[0]


@pytest.mark.parametrize("labels, message", BAD.values(), ids=BAD)
def test_each_bad_label_is_refused_naming_it_and_the_fix(labels, message):
    with pytest.raises(LabelError) as caught:
        check_labels(labels, 3, where="config.json id2label")
    assert message in str(caught.value)
    assert str(caught.value).startswith("config.json id2label") and str(caught.value).endswith(CONFIG_FIX)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("labels", [("no", "yes"), ("négatif", "very good", "a/b: c"), ("0", "1", "2")])
def test_good_labels_pass_unchanged(labels):
    assert check_labels(list(labels), len(labels)) == labels
    assert check_labels(labels) == labels  # the count is checked only when it is known


def test_a_classifier_file_whose_packed_labels_do_not_name_its_outputs():
    """What inspect and the report read of a MediaPipe TextClassifier file: its metadata's task and
    its outputs. (A real file is written with mediapipe, in tests/mobile.)"""
    outputs = [{"name": "probability", "dtype": "float32", "shape": [1, 3]}]
    with pytest.raises(LabelError, match=r"model\.tflite: its packed labels\.txt names 1 label but the "
                                         r"classifier has 3 output classes"):
        check_task_labels({"task": "TextClassifier", "labels": ["only"]}, outputs, "model.tflite")
    with pytest.raises(LabelError, match="names 'a' more than once"):
        check_task_labels({"task": "TextClassifier", "labels": ["a", "b", "a"]}, outputs, "model.tflite")
    check_task_labels({"task": "TextClassifier", "labels": ["a", "b", "c"]}, outputs, "model.tflite")
    check_task_labels({"task": "TextEmbedder", "labels": []}, [{"shape": [1, 16]}], "model.tflite")
    check_task_labels(None, outputs, "model.onnx")


# -- convert --to mediapipe: refused before MediaPipe is needed, nothing written -----------------

def _classifier(root: Path, spiece: Path, labels: tuple[str, ...]) -> Path:
    torch.manual_seed(0)
    config = TINY.replace(num_labels=len(labels), label_names=labels)
    return checkpoints.save(build_model(config, "classification"), root, spiece=spiece)


@pytest.mark.parametrize("labels, message", [
    (("a", "", "c"), "label 1 is empty"),
    (("a", "b", "a"), "names 'a' more than once"),
    (("a", "b\nc", "d"), "holds a line break"),
], ids=["empty", "duplicate", "newline"])
def test_convert_mediapipe_refuses_bad_labels(labels, message, tmp_path, spiece_model):
    checkpoint = _classifier(tmp_path / "ckpt", spiece_model, labels)
    before = sorted((p.name, p.read_bytes()) for p in checkpoint.iterdir())
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(checkpoint), "--to", "mediapipe", "--out", str(out),
                                       "--seq-len", "16"])
    line = one_line(result, message)
    assert "the checkpoint's config.json id2label" in line and CONFIG_FIX in line
    assert not out.exists() and sorted((p.name, p.read_bytes()) for p in checkpoint.iterdir()) == before


def test_convert_mediapipe_refuses_an_empty_label_in_a_real_process(tmp_path, spiece_model):
    checkpoint = _classifier(tmp_path / "ckpt", spiece_model, ("a", "", "c"))
    out = tmp_path / "out"
    done = subprocess.run([str(SCRIPT), "convert", str(checkpoint), "--to", "mediapipe", "--out", str(out),
                           "--seq-len", "16"], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "label 1 is empty" in lines[0], done.stderr
    assert done.stdout == "" and not out.exists()
