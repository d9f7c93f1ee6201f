"""`albert-edge convert --static` as a person runs it: a static TFLite file whose manifest entry says
so (and what the GPU check found), and one line + exit 2 for the options it cannot take."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

pytest.importorskip("tensorflow")

from albert_edge import checkpoints  # noqa: E402
from albert_edge.cli import main  # noqa: E402
from albert_edge.config import AlbertConfig  # noqa: E402
from albert_edge.model import build_model  # noqa: E402
from albert_edge.runtime.accelerator import vulkan_available  # noqa: E402

SCRIPT = Path(sys.executable).with_name("albert-edge")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = build_model(AlbertConfig.preset("tiny"), "base")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return checkpoints.save(model, tmp_path_factory.mktemp("cli") / "ckpt")


def one_line_error(result, text: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and text in lines[0], result.stderr


@pytest.mark.parametrize("extra, text", [
    (["--to", "tflite", "--layers", "loop"], "--layers loop cannot be --static: LiteRT's GPU accelerator runs no WHILE"),
    (["--to", "executorch"], "--static is for the"),
])
def test_bad_static_input(ckpt, tmp_path, extra, text):
    result = CliRunner().invoke(main, ["convert", str(ckpt), "--out", str(tmp_path / "out"), "--seq-len", "8",
                                       "--static", *extra])
    one_line_error(result, text)
    if "executorch" in extra:
        assert "tflite" in result.stderr  # it names the targets that take it
    assert not (tmp_path / "out").exists()


def test_static_tflite_through_the_command(ckpt, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([str(SCRIPT), "convert", str(ckpt), "--to", "tflite", "--static", "--seq-len", "16",
                           "--out", str(out), "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    entry = next(e for e in json.loads((out / "manifest.json").read_text())["files"] if e["name"] == "model.tflite")
    assert entry["static_len"] == 16
    assert {tuple(s["shape"]) for s in entry["inputs"]} == {(1, 16)}
    gpu = entry["parity"]["gpu"]
    if vulkan_available() is None:
        assert gpu["ran"] and gpu["ok"] and gpu["placement"]["all_on_gpu"], gpu
    else:
        assert gpu["ran"] is False and gpu["reason"]
