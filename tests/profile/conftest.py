"""Fixtures for the profiler tests: a tiny ALBERT (vocabulary 400, to match the test spiece.model)
converted to ONNX and TFLite, with a manifest beside the files as `albert-edge convert` writes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from albert_edge.config import AlbertConfig

from ..converters.conftest import tiny_model
from ..cli.conftest import tables_fit  # noqa: F401 (autouse: every table printed fits 100 columns)

CONFIG = dataclasses.replace(AlbertConfig.preset("tiny"), vocab_size=400)  # max_position_embeddings 64
FAST = ["--threads", "1", "--runs", "5", "--min-seconds", "0", "--max-seconds", "0.5", "--warmup", "1"]


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    from albert_edge.converters.onnx import export as export_onnx
    from albert_edge.converters.tflite import export as export_tflite

    out = tmp_path_factory.mktemp("profile-models")
    model = tiny_model(CONFIG)
    export_onnx(model, out / "model.onnx", seq_len=16)
    export_tflite(model, out / "model.tflite", seq_len=16)
    manifest = {"config": CONFIG.to_hf_dict(),
                "files": [{"name": "model.onnx", "precision": "fp32"}, {"name": "model.tflite", "precision": "fp32"}]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.fixture(scope="session")
def onnx_file(model_dir) -> Path:
    return model_dir / "model.onnx"


@pytest.fixture(scope="session")
def tflite_file(model_dir) -> Path:
    return model_dir / "model.tflite"
