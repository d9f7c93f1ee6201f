"""A conversion folder an app can use as it is: beside the files that take token ids, the
checkpoint's spiece.model (copied as it is) and a classifier's labels.json (one name per output
class, in output order), listed in manifest.json with their size and sha256, written only when
the labels pass albert_edge.labels.check_labels, checked before the first export."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from albert_edge import checkpoints
from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.converters.export import convert
from albert_edge.errors import ConversionError
from albert_edge.formats import manifest as manifest_io
from albert_edge.labels import CONFIG_FIX, LabelError
from albert_edge.model import build_model
from albert_edge.runtime import Session
from albert_edge.tokenizer import AlbertTokenizer

TINY = AlbertConfig.preset("tiny").replace(vocab_size=400)  # the size of the shared spiece_model
LABELS = ("négatif", "neutral", "positive, \"quoted\"")
SEQ = 16
# target -> convert options: every file that takes token ids
IDS_IN = {"onnx": ("onnx", {}), "tflite": ("tflite", {}), "ort": ("ort", {}), "executorch": ("executorch", {}),
          "onnx-static": ("onnx", {"static": True}), "tflite-static": ("tflite", {"static": True})}


def _classifier(root: Path, spiece: Path | None, labels: tuple | None = LABELS, head: str = "classification") -> Path:
    torch.manual_seed(0)
    config = TINY.replace(num_labels=len(labels) if labels else 3, label_names=labels)
    return checkpoints.save(build_model(config, head), root, spiece=spiece)


def _with_id2label(checkpoint: Path, id2label: dict) -> Path:
    path = checkpoint / "config.json"
    data = json.loads(path.read_text())
    data["id2label"] = id2label
    path.write_text(json.dumps(data))
    return checkpoint


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, spiece_model) -> Path:
    return _classifier(tmp_path_factory.mktemp("classifier") / "ckpt", spiece_model)


@pytest.mark.parametrize("target, options", IDS_IN.values(), ids=IDS_IN)
def test_the_folder_holds_the_tokenizer_and_the_labels_the_manifest_lists(target, options, classifier, spiece_model,
                                                                         tmp_path):
    out = tmp_path / "out"
    result = convert(classifier, out, targets=(target,), seq_len=SEQ, **options)
    names = {p.name for p in out.iterdir()}
    assert {"spiece.model", "labels.json", "manifest.json"} <= names
    assert (out / "spiece.model").read_bytes() == spiece_model.read_bytes()  # copied as it is
    assert json.loads((out / "labels.json").read_text(encoding="utf-8")) == list(LABELS)
    manifest = manifest_io.check_listed(out)  # size, then sha256, of every file listed: the app files too
    assert {(a.name, a.role) for a in manifest.app_files} == {("spiece.model", "tokenizer"), ("labels.json", "labels")}
    for app in manifest.app_files:
        assert app.size == (out / app.name).stat().st_size and app.sha256 == manifest_io.sha256_of(out / app.name)
    assert manifest.app_notes == [] and result.notes == []
    assert {a["name"] for a in result.to_dict()["app_files"]} == {"spiece.model", "labels.json"}


def test_label_i_names_output_i(classifier, tmp_path):
    """What an app does with the folder: tokenize with its spiece.model, run the file, take the
    label at the index of the highest score; the same class PyTorch's model scores highest."""
    out = tmp_path / "out"
    convert(classifier, out, targets=("onnx",), seq_len=SEQ)
    labels = json.loads((out / "labels.json").read_text(encoding="utf-8"))
    model = checkpoints.model_from_checkpoint(checkpoints.load(classifier), "classification")
    session = Session(out / "model.onnx")
    tokenizer = AlbertTokenizer(out / "spiece.model")
    seen = set()
    for text in ("the cat sat on the mat", "a function returns a value", "errors are raised", "open the file"):
        ids = np.array([tokenizer.encode(text, max_length=SEQ)], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        scores = session.run(feeds)["logits"][0]
        with torch.no_grad():
            expected = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
        expected = expected[0] if isinstance(expected, tuple) else expected
        assert labels[int(np.argmax(scores))] == model.config.label_names[int(torch.argmax(expected[0]))]
        seen.add(labels[int(np.argmax(scores))])
    assert seen <= set(LABELS)


def test_an_edited_labels_json_is_caught_by_the_manifest_check(classifier, tmp_path):
    out = tmp_path / "out"
    convert(classifier, out, targets=("onnx",), seq_len=SEQ)
    (out / "labels.json").write_text(json.dumps(["a", "b", "c"]), encoding="utf-8")
    with pytest.raises(manifest_io.FileChanged, match="labels.json has changed since"):
        manifest_io.check_listed(out)


def test_a_checkpoint_without_spiece_model_converts_and_says_so(tmp_path):
    checkpoint = _classifier(tmp_path / "ckpt", None)
    out = tmp_path / "out"
    result = convert(checkpoint, out, targets=("onnx",), seq_len=SEQ)
    assert sorted(p.name for p in out.iterdir()) == ["labels.json", "manifest.json", "model.onnx"]
    manifest = manifest_io.check_listed(out)
    assert [a.name for a in manifest.app_files] == ["labels.json"]
    (note,) = manifest.app_notes
    assert note.startswith("no spiece.model: ") and str(checkpoint.resolve()) in note
    assert result.notes == manifest.app_notes and result.to_dict()["notes"] == manifest.app_notes


@pytest.mark.parametrize("id2label", [None, {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}],
                         ids=["no-id2label", "placeholders"])
def test_a_classifier_whose_config_names_no_class_gets_no_labels_and_a_note(id2label, tmp_path, spiece_model):
    checkpoint = _classifier(tmp_path / "ckpt", spiece_model, None)
    path = checkpoint / "config.json"
    data = json.loads(path.read_text())
    data.pop("label2id", None)
    if id2label is None:
        data.pop("id2label", None)
        data["num_labels"] = 3
    else:
        data["id2label"] = id2label
    path.write_text(json.dumps(data))
    result = convert(checkpoint, tmp_path / "out", targets=("onnx",), seq_len=SEQ)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["manifest.json", "model.onnx", "spiece.model"]
    (note,) = result.notes
    assert note.startswith("no labels.json: the checkpoint's config.json id2label names no class")
    assert CONFIG_FIX in note
    assert manifest_io.read(tmp_path / "out").app_notes == [note]


def test_a_base_model_gets_the_tokenizer_and_no_labels(tmp_path, spiece_model):
    torch.manual_seed(0)
    checkpoint = checkpoints.save(build_model(TINY, "base"), tmp_path / "ckpt", spiece=spiece_model)
    result = convert(checkpoint, tmp_path / "out", targets=("onnx",), seq_len=SEQ)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["manifest.json", "model.onnx", "spiece.model"]
    assert result.notes == [] and [a.role for a in result.app_files] == ["tokenizer"]


BAD = {"number": (5, "label 0 is 5, not a string"), "null": (None, "label 0 is null, not a string"),
       "list": (["x"], 'label 0 is ["x"], not a string'), "empty": ("", "label 0 is empty"),
       "duplicate": ("b", "names 'b' more than once")}


@pytest.mark.parametrize("target", ["onnx", "tflite", "ort", "executorch"])
@pytest.mark.parametrize("first, message", BAD.values(), ids=BAD)
def test_bad_labels_are_refused_before_any_export(first, message, target, tmp_path, spiece_model):
    checkpoint = _with_id2label(_classifier(tmp_path / "ckpt", spiece_model), {"0": first, "1": "b", "2": "c"})
    steps = []
    with pytest.raises(LabelError) as caught:
        convert(checkpoint, tmp_path / "out", targets=(target,), seq_len=SEQ,
                on_step=lambda what, done, total: steps.append(what))
    assert message in str(caught.value) and str(caught.value).startswith("the checkpoint's config.json id2label")
    assert str(caught.value).endswith(CONFIG_FIX)
    assert steps == ["load checkpoint"] and not (tmp_path / "out").exists()


def test_the_cli_refuses_a_number_label_in_one_line(tmp_path, spiece_model):
    checkpoint = _with_id2label(_classifier(tmp_path / "ckpt", spiece_model), {"0": 5, "1": "b", "2": "c"})
    before = sorted((p.name, p.read_bytes()) for p in checkpoint.iterdir())
    result = CliRunner().invoke(main, ["convert", str(checkpoint), "--to", "tflite", "--to", "onnx", "--out",
                                       str(tmp_path / "out"), "--seq-len", str(SEQ)])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.stderr
    assert "label 0 is 5, not a string; edit id2label in the checkpoint's config.json" in lines[0]
    assert not (tmp_path / "out").exists() and sorted((p.name, p.read_bytes()) for p in checkpoint.iterdir()) == before


def test_a_target_that_packs_labels_refuses_a_classifier_without_names_before_any_export(tmp_path, spiece_model):
    checkpoint = _classifier(tmp_path / "ckpt", spiece_model, None)
    steps = []
    with pytest.raises(ConversionError, match="the mediapipe target needs label names") as caught:
        convert(checkpoint, tmp_path / "out", targets=("onnx", "mediapipe"), seq_len=SEQ,
                on_step=lambda what, done, total: steps.append(what))
    assert CONFIG_FIX in str(caught.value)
    assert steps == ["load checkpoint"] and not (tmp_path / "out").exists()


def test_quantizing_into_the_folder_keeps_the_app_files_listed(classifier, tmp_path):
    from albert_edge.quantize import QuantizeConfig, quantize

    out = tmp_path / "out"
    convert(classifier, out, targets=("onnx",), seq_len=SEQ)
    quantize(out / "model.onnx", QuantizeConfig("int8-dynamic", eval_samples=4, num_threads=1))
    manifest = manifest_io.check_listed(out)
    assert "model.int8-dynamic.onnx" in {e.name for e in manifest.files}
    assert {a.name for a in manifest.app_files} == {"spiece.model", "labels.json"}


def test_a_manifest_written_before_the_app_files_still_reads(classifier, tmp_path):
    out = tmp_path / "out"
    convert(classifier, out, targets=("onnx",), seq_len=SEQ)
    data = json.loads((out / "manifest.json").read_text())
    for key in ("app_files", "app_notes"):
        del data[key]
    data["schema_version"] = 1
    (out / "manifest.json").write_text(json.dumps(data))
    manifest = manifest_io.check_listed(out)
    assert manifest.app_files == [] and manifest.app_notes == [] and manifest.files[0].name == "model.onnx"


def test_convert_force_again_lists_the_app_files_once(classifier, tmp_path):
    out = tmp_path / "out"
    convert(classifier, out, targets=("onnx",), seq_len=SEQ)
    shutil.copy(out / "labels.json", tmp_path / "first.json")
    convert(classifier, out, targets=("tflite",), seq_len=SEQ, force=True)
    manifest = manifest_io.check_listed(out)
    assert {e.name for e in manifest.files} == {"model.onnx", "model.tflite"}
    assert sorted(a.name for a in manifest.app_files) == ["labels.json", "spiece.model"]
    assert (out / "labels.json").read_bytes() == (tmp_path / "first.json").read_bytes()


def test_the_cli_names_the_app_files_and_what_is_missing(tmp_path, spiece_model):
    """The table's reader learns what an app reads beside the files, and why one is not there."""
    with_tokenizer = _classifier(tmp_path / "ckpt", spiece_model)
    result = CliRunner().invoke(main, ["convert", str(with_tokenizer), "--to", "onnx", "--out", str(tmp_path / "a"),
                                       "--seq-len", str(SEQ)])
    assert result.exit_code == 0, result.output
    assert "beside them, for an app: spiece.model, labels.json" in " ".join(result.stdout.split())
    without = _classifier(tmp_path / "bare", None)
    result = CliRunner().invoke(main, ["convert", str(without), "--to", "onnx", "--out", str(tmp_path / "b"),
                                       "--seq-len", str(SEQ)])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.stdout.split())
    assert "beside them, for an app: labels.json" in shown and "note: no spiece.model: " in shown
