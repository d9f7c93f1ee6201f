"""`albert-edge convert` and `albert-edge inspect` as a person runs them: tables, --json, and one
line + exit 2 for every kind of bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner
from onnx import numpy_helper

from albert_edge import checkpoints
from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.files import STAGING_MARK
from albert_edge.model import build_model

TINY = AlbertConfig.preset("tiny")
SCRIPT = Path(sys.executable).with_name("albert-edge")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    """A tiny pretraining checkpoint (base, mlm and pretraining heads; no classifier, no qa)."""
    torch.manual_seed(0)
    model = build_model(TINY, "pretraining")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return checkpoints.save(model, tmp_path_factory.mktemp("cli") / "ckpt")


@pytest.fixture(scope="module")
def converted(ckpt, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("conv") / "out"
    result = run("convert", str(ckpt), "--to", "onnx", "--out", str(out), "--seq-len", "16")
    assert result.exit_code == 0, result.output
    return out


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def one_line_error(result, text: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and text in lines[0], result.stderr


def test_convert_prints_a_table_and_writes_the_manifest(converted):
    assert sorted(p.name for p in converted.iterdir()) == ["manifest.json", "model.onnx"]
    data = json.loads((converted / "manifest.json").read_text())
    assert data["source"]["head"] == "pretraining" and data["files"][0]["format_version"] == {"opset": 20}


def test_convert_table(ckpt, tmp_path):
    result = run("convert", str(ckpt), "--out", str(tmp_path / "o"), "--seq-len", "8", "--head", "mlm")
    assert result.exit_code == 0, result.output
    for text in ("Converted (mlm)", "model.onnx", "duplicates", "max |diff|", "manifest:"):
        assert text in result.stdout


def test_convert_json(ckpt, tmp_path):
    result = run("convert", str(ckpt), "--out", str(tmp_path / "o"), "--seq-len", "8", "--head", "base", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (f,) = data["files"]
    assert data["head"] == "base" and f["name"] == "model.onnx"
    assert [o["name"] for o in f["outputs"]] == ["last_hidden_state", "pooler_output"]
    assert f["weights"]["duplicates"] == [] and f["weights"]["within_bound"]
    assert f["parity"]["max_abs_diff"]["last_hidden_state"] < 1e-4


@pytest.mark.parametrize(
    ("extra", "text"),
    [
        (["--to", "coreml"], "unknown target 'coreml'; choose from onnx, tflite"),
        (["--head", "ner"], "unknown head 'ner'"),
        (["--head", "qa"], "no weights for head 'qa'"),
        (["--seq-len", "65"], "seq-len 65 is above the model's max_position_embeddings (64)"),
        (["--opset", "11"], "opset 11 is too old: choose 17 to"),
        (["--layers", "loop"], "--layers is for the tflite target; targets given: onnx"),
        # MediaPipe's text tasks refuse a file with more than one subgraph
        (["--to", "mediapipe", "--layers", "loop"], "--layers is for the tflite target; targets given: mediapipe"),
        (["--to", "tflite", "--layers", "rolled"], "'rolled' is not one of 'unrolled', 'loop'"),
    ],
)
def test_convert_bad_input(ckpt, tmp_path, extra, text):
    out = tmp_path / "out"
    one_line_error(run("convert", str(ckpt), "--out", str(out), "--seq-len", "8", *extra), text)
    assert not out.exists()


def test_convert_missing_checkpoint(tmp_path):
    result = run("convert", str(tmp_path / "nothing"), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_convert_refuses_a_full_directory_unless_forced(ckpt, converted):
    before = (converted / "manifest.json").read_text()
    one_line_error(run("convert", str(ckpt), "--out", str(converted), "--seq-len", "16"),
                   "already holds files (manifest.json, model.onnx); pass --force to replace them")
    assert (converted / "manifest.json").read_text() == before
    result = run("convert", str(ckpt), "--out", str(converted), "--seq-len", "8", "--force", "--head", "mlm")
    assert result.exit_code == 0, result.output
    assert json.loads((converted / "manifest.json").read_text())["source"]["head"] == "mlm"


def test_inspect_json(converted):
    result = run("inspect", str(converted / "model.onnx"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["format"] == "onnx" and data["duplicates"] == [] and data["metadata"]["opset"] == 20
    assert [i["name"] for i in data["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert data["stored_bytes"] == data["unique_bytes"] and data["ops"]["MatMul"] > 0
    # The manifest beside the file supplies the model's unique parameter bytes, hence the bound.
    manifest = json.loads((converted / "manifest.json").read_text())
    assert data["model_param_bytes"] == manifest["files"][0]["weights"]["model_param_bytes"] > 0
    assert data["within_bound"] is True and data["stored_bytes"] <= data["bound_bytes"]


def test_inspect_shows_duplicates(converted, tmp_path):
    proto = onnx.load(str(converted / "model.onnx"))
    biggest = max(proto.graph.initializer, key=lambda t: np.prod(t.dims))
    proto.graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(biggest).T.copy(), "copy_of_it"))
    onnx.save(proto, str(tmp_path / "copied.onnx"))
    result = run("inspect", str(tmp_path / "copied.onnx"))
    assert result.exit_code == 0, result.output
    for text in ("Duplicated weights", "copy_of_it", "transposed", biggest.name):
        assert text in result.stdout


def test_inspect_bad_files(tmp_path):
    one_line_error(run("inspect", str(tmp_path / "missing.onnx")), "no such file")
    (tmp_path / "x.pt").write_bytes(b"x")
    one_line_error(run("inspect", str(tmp_path / "x.pt")), "expected .onnx, .tflite")
    (tmp_path / "junk.onnx").write_bytes(b"\x08\x07junk \xff\xff")
    one_line_error(run("inspect", str(tmp_path / "junk.onnx")), "junk.onnx")


def test_real_subprocess(ckpt, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    convert = subprocess.run([str(SCRIPT), "convert", str(ckpt), "--out", str(out), "--seq-len", "8", "--json"],
                             capture_output=True, text=True, timeout=300,
                             env={**env, "ALBERT_EDGE_QUIET_FOR": "0"})  # the lines start at once
    assert convert.returncode == 0, convert.stderr
    assert json.loads(convert.stdout)["files"][0]["name"] == "model.onnx"  # progress went to stderr
    # stderr is a pipe: one line per step with the time since the start, never a silent log
    steps = re.findall(r"^\[convert (\d+)/(\d+) .+\] \d+:\d\d elapsed$", convert.stderr, re.M)
    assert len(steps) >= 2 and steps[-1][0] == steps[-1][1], convert.stderr
    assert re.search(r"^\[convert done\] \d+:\d\d in all$", convert.stderr, re.M), convert.stderr
    inspect = subprocess.run([str(SCRIPT), "inspect", str(out / "model.onnx"), "--json"],
                             capture_output=True, text=True, timeout=300, env=env)
    assert inspect.returncode == 0, inspect.stderr
    assert json.loads(inspect.stdout)["duplicates"] == []
    # An opset the exporter cannot write is refused before torch prints its graph: one line, nothing on stdout.
    bad = subprocess.run([str(SCRIPT), "convert", str(ckpt), "--out", str(tmp_path / "bad"), "--seq-len", "8",
                          "--opset", "99", "--json"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert bad.returncode == 2 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert bad.stderr.startswith("Error: opset 99 is too new for the installed exporter: choose 17 to ")
    assert not (tmp_path / "bad").exists()


def test_both_targets(ckpt, tmp_path):
    pytest.importorskip("tensorflow")
    out = tmp_path / "out"
    result = run("convert", str(ckpt), "--to", "onnx", "--to", "tflite", "--out", str(out), "--seq-len", "16",
                 "--head", "mlm", "--json")
    assert result.exit_code == 0, result.output
    files = {f["name"]: f for f in json.loads(result.stdout)["files"]}
    assert sorted(files) == ["model.onnx", "model.tflite"]
    tfl = files["model.tflite"]
    assert tfl["format"] == "tflite" and tfl["format_version"]["schema_version"] >= 3
    assert [i["dtype"] for i in tfl["inputs"]] == ["int32"] * 3
    assert tfl["parity"]["backend"] == "ai_edge_litert" and tfl["parity"]["ok"]
    assert tfl["parity"]["seq_lens"] == [1, 5, 16, 64]  # resized away from the built length
    inspect = json.loads(run("inspect", str(out / "model.tflite"), "--json").stdout)
    assert inspect["duplicates"] == [] and inspect["format"] == "tflite"
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.onnx", "model.tflite"]


def test_sigterm_mid_conversion_leaves_nothing(tmp_path):
    # SIGTERM is handled as Ctrl-C is (KeyboardInterrupt), so this covers both.
    config = TINY.replace(vocab_size=2000, hidden_size=128, num_attention_heads=4, intermediate_size=512,
                          num_hidden_layers=12, max_position_embeddings=512)
    ckpt = checkpoints.save(build_model(config, "base"), tmp_path / "ckpt")
    out = tmp_path / "out"
    proc = subprocess.Popen([str(SCRIPT), "convert", str(ckpt), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(f".out.*{STAGING_MARK}/model.onnx")) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)  # the file is written, verification is running
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr  # 128 + SIGTERM, as a shell reports it
    said = [line for line in stderr.strip().splitlines() if not line.startswith("[convert ")]  # progress lines
    assert said == ["Error: terminated (SIGTERM); nothing half-written was left behind"]
    assert not out.exists()
