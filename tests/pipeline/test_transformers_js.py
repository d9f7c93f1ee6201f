"""`albert-edge pipeline --to transformers-js`: the folder transformers.js loads, made beside the
other files; a pretraining checkpoint's files are its masked-LM part (transformers.js has no
pretraining model); a checkpoint without a spiece.model leaves the target out and says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main

pytest.importorskip("torch")
pytest.importorskip("tokenizers")

FAST = ["--seq-len", "16", "--profile-seq-len", "8", "--runs", "2", "--min-seconds", "0", "--threads", "1",
        "--scheme", "int8-dynamic"]


def pipeline(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["pipeline", *map(str, args)])
    json_out = "--json" in args and result.exit_code == 0  # the answer on stdout, progress lines on stderr
    return result.exit_code, result.stdout if json_out else result.output


def _checkpoint(out: Path, head: str, spiece: Path | None) -> Path:
    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model

    torch.manual_seed(0)
    config = AlbertConfig.preset("tiny").replace(vocab_size=400)
    return checkpoints.save(build_model(config, head), out, **({"spiece": spiece} if spiece else {}))


def _steps(output: str) -> dict[str, dict]:
    return {s["step"]: s for s in json.loads(output)["steps"]}


def test_a_pretraining_checkpoint_gets_its_masked_lm_folder_beside_the_other_files(tmp_path, spiece_model):
    checkpoint = _checkpoint(tmp_path / "ckpt", "pretraining", spiece_model)
    code, output = pipeline(checkpoint, "--out", tmp_path / "out", *FAST, "--to", "onnx", "--to", "transformers-js",
                            "--json")
    assert code == 0, output
    files = tmp_path / "out" / "ckpt" / "files"
    folder = files / "transformers-js"
    assert {"config.json", "tokenizer.json", "onnx"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["AlbertForMaskedLM"]
    listed = {f["name"] for f in json.loads((files / "manifest.json").read_text())["files"]}
    assert {"model.onnx", "model.transformers-js.onnx", "model.int8-dynamic.onnx"} <= listed
    assert "mlm head: transformers.js has no pretraining model" in _steps(output)["convert"]["detail"]
    report = (tmp_path / "out" / "ckpt" / "report" / "report.md").read_text()
    assert "model.transformers-js.onnx" in report


def test_without_a_tokenizer_the_target_is_left_out_and_says_why(tmp_path):
    checkpoint = _checkpoint(tmp_path / "ckpt", "base", None)
    code, output = pipeline(checkpoint, "--out", tmp_path / "out", *FAST, "--to", "onnx", "--to", "transformers-js",
                            "--only", "convert", "--json")
    assert code == 0, output
    detail = _steps(output)["convert"]["detail"]
    assert "left out: transformers-js; it carries the tokenizer, and the checkpoint has no spiece.model" in detail
    assert not (tmp_path / "out" / "ckpt" / "files" / "transformers-js").exists()
    code, output = pipeline(checkpoint, "--out", tmp_path / "again", *FAST[:-2], "--to", "transformers-js",
                            "--only", "convert")
    assert code == 2 and "has no spiece.model, and every target asked for (transformers-js)" in output
