"""`albert-edge pipeline --static` on a tiny checkpoint: static-shape files in files-static/ beside
files/, quantized for their accelerators (fp16 .tflite, int8-static .onnx), a report that covers
both folders and names which file each accelerator takes; off by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.pipeline import STATIC_DIR, PipelineError, PipelineOptions

FAST = ["--seq-len", "16", "--profile-seq-len", "8,16", "--runs", "2", "--min-seconds", "0", "--threads", "1",
        "--scheme", "int8-dynamic"]


def pipeline(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["pipeline", *map(str, args)])
    json_out = "--json" in args and result.exit_code == 0  # the answer on stdout, progress lines on stderr
    return result.exit_code, result.stdout if json_out else result.output


def _checkpoint(out: Path, spiece: Path | None) -> Path:
    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model

    torch.manual_seed(0)
    config = AlbertConfig.preset("tiny").replace(vocab_size=400)
    return checkpoints.save(build_model(config, "base"), out, **({"spiece": spiece} if spiece else {}))


@pytest.fixture(scope="module")
def ran(tmp_path_factory, spiece_model) -> Path:
    root = tmp_path_factory.mktemp("static")
    checkpoint = _checkpoint(root / "ckpt", spiece_model)
    out = root / "out"
    code, output = pipeline(checkpoint, "--out", out, *FAST, "--to", "onnx", "--to", "tflite", "--static", "--json")
    assert code == 0, output
    return out / "ckpt"


def _manifest(folder: Path) -> dict[str, dict]:
    return {f["name"]: f for f in json.loads((folder / "manifest.json").read_text())["files"]}


def test_static_files_beside_the_dynamic_ones(ran):
    static, dynamic = _manifest(ran / STATIC_DIR), _manifest(ran / "files")
    assert {n: f["precision"] for n, f in static.items()} == {
        "model.onnx": "fp32", "model.tflite": "fp32", "model.int8-static.onnx": "int8-static",
        "model.fp16.tflite": "fp16"}
    assert {f["static_len"] for f in static.values()} == {16}
    assert set(dynamic) == {"model.onnx", "model.tflite", "model.int8-dynamic.onnx", "model.int8-dynamic.tflite"}
    assert {f["static_len"] for f in dynamic.values()} == {None}
    # the profile times the dynamic files (the accelerators the static ones are for are not here)
    records = json.loads((ran / "profile.json").read_text())
    assert {Path(r["file"]).parent.name for r in records} == {"files"}


def test_the_report_covers_both_folders_and_names_a_file_per_accelerator(ran):
    report = json.loads((ran / "report" / "report.json").read_text())
    labels = {f["label"] for f in report["files"]}
    assert labels == {f"files/{n}" for n in _manifest(ran / "files")} | \
        {f"{STATIC_DIR}/{n}" for n in _manifest(ran / STATIC_DIR)}
    acc = report["accelerators"]
    rows = {r["label"]: r for r in acc["rows"]}
    assert rows[f"{STATIC_DIR}/model.int8-static.onnx"]["nnapi"]["partitions"] == 1
    assert rows["files/model.tflite"]["gpu"]["text"].startswith("CPU only: dynamic shapes")
    take = {key: t["file"] for key, t in acc["take"].items()}
    assert take["nnapi"] == f"{STATIC_DIR}/model.int8-static.onnx"  # NNAPI takes both static .onnx whole: the int8
    assert take["gpu"].startswith(f"{STATIC_DIR}/") and take["gpu"].endswith(".tflite")
    assert take["cpu"].startswith("files/")
    markdown = (ran / "report" / "report.md").read_text()
    assert acc["sentence"] in markdown and f"in {STATIC_DIR}/" in markdown
    assert report["context"]["static_dir"] == STATIC_DIR


def test_a_rerun_with_static_skips_what_is_up_to_date(ran):
    checkpoint = ran.parent.parent / "ckpt"
    code, output = pipeline(checkpoint, "--out", ran.parent, *FAST, "--to", "onnx", "--to", "tflite", "--static",
                            "--json")
    assert code == 0, output
    assert {s["step"]: s["status"] for s in json.loads(output)["steps"]} == {
        "checkpoint": "given", "convert": "skipped (up to date)", "quantize": "skipped (up to date)",
        "profile": "skipped (up to date)", "report": "skipped (up to date)"}


def test_without_a_tokenizer_int8_static_is_left_out_and_says_why(tmp_path):
    checkpoint = _checkpoint(tmp_path / "ckpt", None)
    code, output = pipeline(checkpoint, "--out", tmp_path / "out", *FAST, "--to", "onnx", "--static",
                            "--only", "convert,quantize", "--json")
    assert code == 0, output
    quantize = next(s for s in json.loads(output)["steps"] if s["step"] == "quantize")
    assert "model.int8-static.onnx" not in _manifest(tmp_path / "out" / "ckpt" / STATIC_DIR)
    assert f"left out: {STATIC_DIR}/model.onnx int8-static" in quantize["detail"]
    assert "spiece.model" in quantize["detail"]


def test_static_is_off_by_default_and_needs_a_target_that_has_it(tmp_path):
    assert PipelineOptions(out_dir=tmp_path).static is False
    assert PipelineOptions(out_dir=tmp_path).static_targets == ()
    assert PipelineOptions(out_dir=tmp_path, static=True, targets=("onnx", "ort")).static_targets == ("onnx",)
    with pytest.raises(PipelineError, match="--static makes static onnx and tflite files; targets given: ort"):
        PipelineOptions(out_dir=tmp_path, static=True, targets=("ort",))


def test_the_builtin_default_makes_static_files_of_the_small_model_only(tmp_path):
    from albert_edge.pipeline import _models, default

    models, _ = _models(PipelineOptions(out_dir=tmp_path, static=True), tmp_path)
    assert {m.name: m.static for m in models} == {default.RANDOM_NAME: False, default.SMALL_NAME: True,
                                                  default.CLASSIFIER_NAME: False}
    random = next(m for m in models if m.name == default.RANDOM_NAME)
    assert default.SMALL_NAME in random.context["static_in"]
