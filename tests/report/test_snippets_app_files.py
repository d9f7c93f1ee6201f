"""The report's app snippets load the files beside a model file by the names they have in its
folder (spiece.model to make the token ids, a classifier's labels.json) and name the class the
file scores highest with the label at its index; what they name is what the manifest lists."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

from albert_edge import checkpoints
from albert_edge.config import AlbertConfig
from albert_edge.converters.export import convert
from albert_edge.formats.manifest import FileChanged
from albert_edge.labels import LabelError
from albert_edge.model import build_model
from albert_edge.report import write_report
from albert_edge.report.accelerator_snippets import ACCELERATED
from albert_edge.report.snippets import PLATFORMS, AppFiles, facts_of, file_snippet, snippets

IDS = ("input_ids", "attention_mask", "token_type_ids")
APP = AppFiles("spiece.model", "labels.json", 3)
LOADS = {"kotlin": ('context.assets.open("spiece.model")', 'context.assets.open("labels.json")'),
         "swift": ('forResource: "spiece", withExtension: "model"', 'forResource: "labels", withExtension: "json"'),
         "js": ('fetch("spiece.model")', 'fetch("labels.json")')}
BEST = {"kotlin": "val label = labels[scores.indices.maxBy { scores[it] }]",
        "swift": "let label = labels[scores.indices.max { scores[$0] < scores[$1] }!]",
        "js": "const label = labels[scores.indexOf(Math.max(...scores))];"}


def _row(name: str, fmt: str, dtype: str, outputs, app: AppFiles = APP, inputs=IDS, task: str | None = None) -> dict:
    return {"name": name, "format": fmt, "app": app, "inspect": {
        "inputs": [{"name": n, "dtype": dtype, "shape": [1, "n"]} for n in inputs],
        "outputs": [{"name": n, "dtype": "float32", "shape": list(s)} for n, s in outputs],
        "metadata": {"task": {"task": task}} if task else {}}}


CLASSIFIERS = {
    "onnx": _row("model.onnx", "onnx", "int64", [("logits", (1, 3))]),
    "ort": _row("model.ort", "ort", "int64", [("logits", (1, 3))]),
    "tflite": _row("model.tflite", "tflite", "int32", [("logits", (1, 3))]),
    "pte": _row("model.pte", "executorch", "int64", [("logits", (1, 3))]),
}


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_a_classifier_snippet_loads_its_tokenizer_and_labels_and_names_the_best_class(name):
    (group,) = snippets([CLASSIFIERS[name]])
    (f,) = group["files"]
    assert f["app_files"] == {"tokenizer": "spiece.model", "labels": "labels.json"}
    assert "beside it: spiece.model (the tokenizer), labels.json (3 labels" in f["note"]
    for platform in PLATFORMS:
        code = f["code"][platform]
        if code is None:  # ExecuTorch has no web runtime
            continue
        tokenizer, labels = LOADS[platform]
        assert tokenizer in code and labels in code, (name, platform)
        assert "/* token ids, from the tokenizer */" in code  # the app's own part, as before
        assert BEST[platform] in code, (name, platform)
        # the scores are read after the call that gives the output holding them
        ran = re.search(r"runSignature\(|runner\.output\(|model\.predict\(|result\.get\(|outputs\[|outputs\.logits",
                        code)
        assert ran.start() < re.search(r"(val|let|const) scores", code).start(), (name, platform)
        assert code.index(labels) < code.index(BEST[platform])


def test_a_text_input_file_loads_the_labels_but_no_tokenizer():
    row = _row("model.text.onnx", "onnx", "object", [("logits", (1, 3)), ("token_ids", (1, "n"))], inputs=("text",))
    (group,) = snippets([row])
    code = group["files"][0]["code"]
    assert 'context.assets.open("labels.json")' in code["kotlin"] and "spiece" not in code["kotlin"]
    assert BEST["kotlin"] in code["kotlin"] and BEST["swift"] in code["swift"]
    assert group["files"][0]["app_files"] == {"tokenizer": None, "labels": "labels.json"}


def test_a_mediapipe_file_loads_neither_its_labels_and_tokenizer_are_inside():
    row = _row("model.mediapipe.tflite", "tflite", "int32", [("probability", (1, 3))], task="TextClassifier")
    (group,) = snippets([row])
    f = group["files"][0]
    assert all("labels.json" not in f["code"][p] and "spiece" not in f["code"][p] for p in PLATFORMS)
    assert f["app_files"] == {"tokenizer": None, "labels": None}


def test_a_base_model_file_loads_the_tokenizer_and_no_labels():
    row = _row("model.onnx", "onnx", "int64", [("last_hidden_state", (1, "n", 16))],
               app=AppFiles("spiece.model"))
    (group,) = snippets([row])
    code = group["files"][0]["code"]
    assert 'fetch("spiece.model")' in code["js"] and "labels" not in code["js"]


def test_a_file_no_manifest_lists_has_the_old_lines():
    row = _row("model.onnx", "onnx", "int64", [("logits", (1, 3))], app=AppFiles())
    code = snippets([row])[0]["files"][0]["code"]
    assert "/* token ids, from the tokenizer */" in code["kotlin"] and "labels" not in code["kotlin"]


@pytest.mark.parametrize("key", ACCELERATED)
def test_the_accelerator_lines_load_them_too(key):
    framework = ACCELERATED[key]
    row = _row("model.onnx" if key != "gpu" else "model.tflite", "onnx" if key != "gpu" else "tflite",
               "int64" if key != "gpu" else "int32", [("logits", (1, 3))])
    f = file_snippet(framework, facts_of(row), row["name"])
    for platform in PLATFORMS:
        code = f["code"][platform]
        if code is None:
            continue
        assert all(load in code for load in LOADS[platform]) and BEST[platform] in code, (key, platform)


# -- a real conversion, read by the report -----------------------------------------------------

@pytest.fixture(scope="module")
def classified(tmp_path_factory, spiece_model):
    torch.manual_seed(0)
    config = AlbertConfig.preset("tiny").replace(vocab_size=400, num_labels=3, label_names=("neg", "neutral", "pos"))
    root = tmp_path_factory.mktemp("classified")
    checkpoint = checkpoints.save(build_model(config, "classification"), root / "ckpt", spiece=spiece_model)
    out = root / "edge"
    convert(checkpoint, out, targets=("onnx", "tflite"), seq_len=16)
    return out


def test_the_report_snippets_name_the_files_of_the_folder(classified, tmp_path):
    report = write_report([classified], tmp_path / "report", charts=False)
    files = [f for g in report.data["snippets"] for f in g["files"]]
    assert {f["name"] for f in files} == {"model.onnx", "model.tflite"}
    for f in files:
        assert f["app_files"] == {"tokenizer": "spiece.model", "labels": "labels.json"}
        for platform in (p for p in PLATFORMS if f["code"][p] is not None):  # a .tflite has no JavaScript
            code = f["code"][platform]
            assert all(load in code for load in LOADS[platform]) and BEST[platform] in code
    assert 'fetch("labels.json")' in (tmp_path / "report" / "report.md").read_text()


def test_an_edited_labels_json_stops_the_report(classified, tmp_path):
    copy = shutil.copytree(classified, tmp_path / "edge")
    (copy / "labels.json").write_text(json.dumps(["a", "b", "c"]) + "\n")
    with pytest.raises(FileChanged, match="labels.json has changed since"):
        write_report([copy], tmp_path / "report", charts=False)


def test_labels_that_do_not_name_the_outputs_stop_the_report(classified, tmp_path):
    """A manifest rewritten to list a labels.json of two names for a file of three classes."""
    from albert_edge.formats import manifest as manifest_io

    copy = shutil.copytree(classified, tmp_path / "edge")
    (copy / "labels.json").write_text(json.dumps(["a", "b"]) + "\n")
    manifest = manifest_io.read(copy)
    manifest.app_files = [a if a.role != "labels" else manifest_io.app_file_entry(copy / "labels.json", "labels")
                          for a in manifest.app_files]
    manifest_io.write(manifest, copy)
    with pytest.raises(LabelError, match="names 2 labels but the classifier has 3 output classes"):
        write_report([copy], tmp_path / "report", charts=False)
