"""Fixtures of the report tests: a tiny random checkpoint (with its weights note), its
conversion (ONNX + TFLite) with an int8 file, a tiny trained checkpoint converted and quantized
on real text, and real profile records of the files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ..cli.conftest import tables_fit  # noqa: F401 (autouse: every table printed fits 100 columns)

SEQ = 16


def make_checkpoint(out: Path, seed: int = 0, random_note: bool = False) -> Path:
    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model
    from albert_edge.report import WEIGHTS_NOTE

    torch.manual_seed(seed)
    checkpoints.save(build_model(AlbertConfig.preset("tiny"), "base"), out)
    if random_note:
        (out / WEIGHTS_NOTE).write_text(json.dumps({"weights": "random-init", "seed": seed}))
    return out


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt")


@pytest.fixture(scope="session")
def conversion(tmp_path_factory, tiny_checkpoint) -> Path:
    """model.onnx, model.tflite and model.int8-dynamic.onnx with their manifest (read-only: copy
    it before changing anything)."""
    from albert_edge.converters.export import convert
    from albert_edge.quantize import QuantizeConfig, quantize

    out = tmp_path_factory.mktemp("conversion") / "edge"
    convert(tiny_checkpoint, out, targets=("onnx", "tflite"), seq_len=SEQ)
    quantize(out / "model.onnx", QuantizeConfig("int8-dynamic", eval_samples=8, num_threads=1))
    return out


@pytest.fixture(scope="session")
def trained_conversion(tmp_path_factory, spiece_model) -> Path:
    """A tiny MLM trained a few hundred steps (the quantize tests' recipe), converted and quantized
    with its agreement measured on real held-out text."""
    from albert_edge import checkpoints
    from albert_edge.converters.export import convert
    from albert_edge.quantize import QuantizeConfig, quantize

    from ..quantize.conftest import CORPUS, SEQ as TRAINED_SEQ, train_tiny_mlm

    root = tmp_path_factory.mktemp("trained")
    checkpoint = checkpoints.save(train_tiny_mlm(spiece_model, steps=200), root / "ckpt", spiece=spiece_model)
    out = root / "edge"
    convert(checkpoint, out, targets=("onnx",), seq_len=TRAINED_SEQ)
    quantize(out / "model.onnx", QuantizeConfig("int8-dynamic", calibration=(CORPUS,), eval_samples=16,
                                                num_threads=1))
    return out


@pytest.fixture(scope="session")
def profile_json(tmp_path_factory, conversion) -> Path:
    """Real profile records of the conversion's files, as `albert-edge profile --json` writes them."""
    from albert_edge.profile import ProfileSettings, profile

    files = [conversion / "model.onnx", conversion / "model.tflite"]
    records = profile(files, ProfileSettings(seq_lens=(8, SEQ), threads=(1,), runs=3, min_seconds=0.0, warmup=1))
    path = tmp_path_factory.mktemp("profile") / "profile.json"
    path.write_text(json.dumps([r.to_dict() for r in records], indent=2))
    return path


def copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
