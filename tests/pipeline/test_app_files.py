"""The pipeline's folders go into an app as they are: files/ and files-static/ each hold the
checkpoint's spiece.model and a classifier's labels.json, listed in their manifest; the convert
step records them, so a re-run converts again when one is gone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.formats import manifest as manifest_io
from albert_edge.pipeline import STATIC_DIR

LABELS = ("sports", "science", "art")
ARGS = ["--seq-len", "16", "--profile-seq-len", "8,16", "--to", "onnx", "--static", "--only", "convert", "--json"]


def _classifier(out: Path, spiece: Path) -> Path:
    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model

    torch.manual_seed(0)
    config = AlbertConfig.preset("tiny").replace(vocab_size=400, num_labels=3, label_names=LABELS)
    return checkpoints.save(build_model(config, "classification"), out, spiece=spiece)


def _pipeline(*args) -> dict:
    result = CliRunner().invoke(main, ["pipeline", *map(str, args)])
    assert result.exit_code == 0, result.output
    return {s["step"]: s["status"] for s in json.loads(result.stdout)["steps"]}  # progress lines: stderr


@pytest.fixture(scope="module")
def ran(tmp_path_factory, spiece_model) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("app-files")
    checkpoint = _classifier(root / "ckpt", spiece_model)
    assert _pipeline(checkpoint, "--out", root / "out", *ARGS)["convert"] == "ran"
    return checkpoint, root / "out" / "ckpt"


@pytest.mark.parametrize("folder", ["files", STATIC_DIR])
def test_each_folder_holds_the_tokenizer_and_the_labels(ran, folder, spiece_model):
    out = ran[1] / folder
    manifest = manifest_io.check_listed(out)
    assert {(a.name, a.role) for a in manifest.app_files} == {("spiece.model", "tokenizer"), ("labels.json", "labels")}
    assert (out / "spiece.model").read_bytes() == spiece_model.read_bytes()
    assert json.loads((out / "labels.json").read_text(encoding="utf-8")) == list(LABELS)


def test_a_missing_labels_json_is_converted_again(ran):
    checkpoint, model_dir = ran
    out = model_dir.parent
    assert _pipeline(checkpoint, "--out", out, *ARGS)["convert"] == "skipped (up to date)"
    (model_dir / STATIC_DIR / "labels.json").unlink()
    assert _pipeline(checkpoint, "--out", out, *ARGS)["convert"] == "ran"
    assert json.loads((model_dir / STATIC_DIR / "labels.json").read_text(encoding="utf-8")) == list(LABELS)
