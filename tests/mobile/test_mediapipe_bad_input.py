"""Bad input to the MediaPipe target: one ``Error: ...`` line, exit 2, nothing written."""

from __future__ import annotations

import shutil

import pytest
import torch
from click.testing import CliRunner

from albert_edge import checkpoints
from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.formats.tflite_metadata import read_metadata
from albert_edge.model import build_model

TINY = AlbertConfig.preset("tiny").replace(vocab_size=400)


def _files(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


def one_line(result, message: str) -> str:
    text = result.output + (result.stderr or "")
    assert "Traceback" not in text, text
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, text)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert message in lines[0], (message, lines[0])
    assert result.stdout == ""
    return lines[0]


@pytest.fixture(scope="module")
def unlabelled(tmp_path_factory, spiece_model):
    """A classifier whose config.json names its labels LABEL_0, LABEL_1 only."""
    torch.manual_seed(0)
    return checkpoints.save(build_model(TINY.replace(num_labels=2), "classification"),
                            tmp_path_factory.mktemp("unlabelled"), spiece=spiece_model)


@pytest.fixture(scope="module")
def mlm(tmp_path_factory, spiece_model):
    torch.manual_seed(0)
    return checkpoints.save(build_model(TINY, "mlm"), tmp_path_factory.mktemp("mlm"), spiece=spiece_model)


@pytest.mark.parametrize("which, message", [
    ("unlabelled", "the mediapipe target needs label names"),
    ("mlm", "the mediapipe target carries a 'classification' head (TextClassifier) or the 'base' model"),
])
def test_a_head_the_target_cannot_carry(which, message, request, tmp_path):
    checkpoint = request.getfixturevalue(which)
    before = _files(checkpoint)
    result = CliRunner().invoke(main, ["convert", str(checkpoint), "--to", "mediapipe", "--out", str(tmp_path / "out"),
                                       "--seq-len", "16"])
    one_line(result, message)
    assert not (tmp_path / "out").exists() and _files(checkpoint) == before


def _damaged(source, target):
    """``source`` with the root offset of its metadata flatbuffer pointing past the end."""
    raw = bytearray(source.read_bytes())
    at = raw.index(b"M001") - 4
    raw[at:at + 4] = (len(raw) * 2).to_bytes(4, "little")
    target.write_bytes(raw)
    return target


def test_damaged_metadata_is_refused(classifier_file, tmp_path):
    folder = tmp_path / "files"
    shutil.copytree(classifier_file.path.parent, folder)
    bad = _damaged(classifier_file.path, folder / classifier_file.path.name)
    before = _files(folder)
    line = one_line(CliRunner().invoke(main, ["inspect", str(bad)]), "damaged TFLite metadata")
    assert bad.name in line
    with pytest.raises(ValueError, match="damaged TFLite metadata"):
        read_metadata(bad)
    # quantize refuses it before reading it: the manifest beside it recorded other bytes.
    out = folder / "model.mediapipe.int8-dynamic.tflite"
    one_line(CliRunner().invoke(main, ["quantize", str(bad), "--scheme", "int8-dynamic", "--out", str(out)]),
             "has changed since")
    assert _files(folder) == before
