"""The demo checks what it loads: each model file against its task folder's manifest.json (a
file whose bytes changed never answers), and labels.json through the one label validation
(albert_edge.labels). Each refusal is one line and exit 2 from `albert-edge demo classify`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.demo.engine import Bundle, BundleError, Engine

SCRIPT = Path(sys.executable).with_name("albert-edge")
TEXT = "Return the quotient of two decimal numbers."


def one_line(result, *words: str) -> str:
    text = result.output + (result.stderr or "")
    assert "Traceback" not in text, text
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, text)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert result.stdout == ""
    return lines[0]


def _flip_weights(path: Path) -> None:
    """Flip 8 bytes inside the .tflite's largest weight buffer: the file still loads and runs."""
    from albert_edge.formats.tflite_schema import Model

    data = bytearray(path.read_bytes())
    model = Model.GetRootAs(data, 0)
    buffers = [model.Buffers(i) for i in range(model.BuffersLength())]
    largest = max(buffers, key=lambda b: b.Size() if b.Offset() > 1 else b.DataLength())
    if largest.Offset() > 1:
        start = largest.Offset() + largest.Size() // 2
    else:
        raw = largest.DataAsNumpy().tobytes()
        start = bytes(data).index(raw) + len(raw) // 2
    data[start:start + 8] = bytes(b ^ 0x55 for b in data[start:start + 8])
    path.write_bytes(bytes(data))


@pytest.fixture()
def flipped(tiny_bundle, tmp_path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy)
    _flip_weights(copy / "classifier" / "model.tflite")
    return copy


def test_the_flipped_file_still_runs_without_its_manifest(flipped, tmp_path):
    """What refuses the bundle below is the check, not the runtime."""
    from albert_edge.runtime import Session

    loose = tmp_path / "loose.tflite"
    shutil.copyfile(flipped / "classifier" / "model.tflite", loose)
    session = Session(loose, num_threads=1)
    assert session.outputs


def test_a_changed_file_never_answers(flipped):
    engine = Engine(Bundle(flipped), "onnx-int8", num_threads=1)
    with pytest.raises(BundleError, match=r"model\.tflite has changed since .*manifest\.json was written "
                                          r"\(same size, sha256 differs\)"):
        engine.select("tflite-fp32")
    assert engine.variant.key == "onnx-int8" and engine.classify(TEXT)["model"] == "onnx-int8"


def test_demo_classify_refuses_a_changed_file(flipped):
    one_line(CliRunner().invoke(main, ["demo", "classify", str(flipped), TEXT, "--model", "tflite-fp32",
                                       "--threads", "1"]),
             "model.tflite has changed since", "sha256 differs", "albert-edge demo bundle")


def test_demo_classify_refuses_a_changed_file_in_a_real_process(flipped):
    done = subprocess.run([str(SCRIPT), "demo", "classify", str(flipped), TEXT, "--model", "tflite-fp32",
                           "--threads", "1"], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "model.tflite has changed since" in lines[0], done.stderr
    assert done.stdout == ""


def test_a_whole_bundle_answers(tiny_bundle):
    result = CliRunner().invoke(main, ["demo", "classify", str(tiny_bundle), TEXT, "--model", "tflite-fp32",
                                       "--threads", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model"] == "tflite-fp32"


@pytest.mark.parametrize("labels, message", [
    (["asyncio", "", "email", "xml"], "label 1 is empty"),
    (["asyncio", "deci\nmal", "email", "xml"], "holds a line break"),
    (["asyncio", 5, "email", "xml"], "label 1 is 5, not a string"),
    (["asyncio", None, "email", "xml"], "label 1 is null, not a string"),
    (["asyncio", ["x"], "email", "xml"], 'label 1 is ["x"], not a string'),
    (["asyncio", "email", "email", "xml"], "names 'email' more than once (labels 1 and 2)"),
    (["LABEL_0", "LABEL_1", "LABEL_2", "LABEL_3"], "only placeholders"),
], ids=["empty", "newline", "number", "null", "list", "duplicate", "placeholders"])
def test_demo_refuses_bad_labels_json(labels, message, tiny_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy)
    (copy / "labels.json").write_text(json.dumps(labels))
    line = one_line(CliRunner().invoke(main, ["demo", "classify", str(copy), TEXT, "--threads", "1"]), message)
    assert "labels.json" in line and "albert-edge demo bundle" in line


@pytest.mark.parametrize("name", ["labels.json", "spiece.model"])
def test_demo_classify_refuses_a_changed_app_file_of_the_task_folder(name, tiny_bundle, tmp_path):
    """The classifier folder's labels.json reordered (same size) or its spiece.model with a byte
    changed: the one manifest check of the file in use covers the app files its manifest lists."""
    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy)
    path = copy / "classifier" / name
    data = bytearray(path.read_bytes())
    if name == "labels.json":
        data = bytearray(json.dumps(list(reversed(json.loads(data))), ensure_ascii=False).encode() + b"\n")
    else:
        data[len(data) // 2] ^= 0x55
    assert len(data) == path.stat().st_size and bytes(data) != path.read_bytes()
    path.write_bytes(bytes(data))
    one_line(CliRunner().invoke(main, ["demo", "classify", str(copy), TEXT, "--model", "tflite-fp32",
                                       "--threads", "1"]),
             f"classifier/{name} has changed since", "sha256 differs", "albert-edge demo bundle")
