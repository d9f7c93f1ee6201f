"""`albert-edge pipeline --to mediapipe`: the convert step writes model.mediapipe.tflite and the
quantize step its int8 file, which keeps the metadata; the profile step times both through Session
and through MediaPipe Tasks."""

from __future__ import annotations

import json

from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.formats.tflite_metadata import read_metadata


def test_pipeline_converts_and_quantizes_the_mediapipe_target(tmp_path, classifier_checkpoint):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["pipeline", str(classifier_checkpoint), "--out", str(out), "--seq-len", "32",
                                       "--profile-seq-len", "32", "--threads", "1", "--to", "mediapipe",
                                       "--scheme", "int8-dynamic", "--runs", "3", "--min-seconds", "0",
                                       "--only", "convert,quantize,profile"])
    assert result.exit_code == 0, result.output
    manifest = json.loads(next(out.glob("*/files/manifest.json")).read_text())
    assert {f["name"]: f["precision"] for f in manifest["files"]} == {
        "model.mediapipe.tflite": "fp32", "model.mediapipe.int8-dynamic.tflite": "int8-dynamic"}
    files = next(out.glob("*/files"))
    assert read_metadata(files / "model.mediapipe.int8-dynamic.tflite").task == "TextClassifier"
    records = json.loads(next(out.glob("*/profile.json")).read_text())
    assert sorted((r["file_name"], r["runtime"]) for r in records) == sorted(
        (name, runtime) for name in ("model.mediapipe.tflite", "model.mediapipe.int8-dynamic.tflite")
        for runtime in ("ai_edge_litert", "mediapipe"))
