"""`albert-edge quantize` of a static [1, N] file (convert --static), as a user runs it: the
held-out and calibration text is fed one row at a time padded to N, the quantized file is static
too, and a --seq-len above N is one line, exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from albert_edge.cli import main

from .conftest import CORPUS, SEQ


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory, trained_checkpoint):
    from albert_edge.converters.export import convert

    out = tmp_path_factory.mktemp("static-cli") / "static"
    convert(trained_checkpoint, out, targets=("onnx", "tflite"), seq_len=SEQ, static=True)
    return out


@pytest.mark.parametrize("file, scheme", [("model.onnx", "int8-static"), ("model.onnx", "int8-dynamic"),
                                          ("model.tflite", "fp16"), ("model.tflite", "int8-dynamic")])
def test_quantize_a_static_file(static_dir, file, scheme):
    parent = static_dir / file
    out = static_dir / f"model.{scheme}{parent.suffix}"
    result = CliRunner().invoke(main, ["quantize", str(parent), "--scheme", scheme, "--calibration", str(CORPUS),
                                       "--samples", "8", "--eval-samples", "8", "--out", str(out), "--force",
                                       "--json"])
    assert result.exit_code == 0, result.output
    made = json.loads(result.stdout)
    assert made["kept"] and made["calibration"]["static_len"] == SEQ
    entry = next(e for e in json.loads((static_dir / "manifest.json").read_text())["files"] if e["name"] == out.name)
    assert entry["static_len"] == SEQ  # the quantized file takes [1, N] too
    if parent.suffix == ".tflite":  # and LiteRT's GPU accelerator ran it, where there is a Vulkan device
        from albert_edge.runtime.accelerator import vulkan_available

        gpu = entry["parity"]["gpu"]
        if vulkan_available() is not None:
            assert gpu == {"ran": False, "reason": gpu["reason"]} and "Vulkan" in gpu["reason"]
        else:
            assert gpu["ran"] and gpu["against"] == "the same file on the CPU"
            assert gpu["placement"]["ops"] > 0 and "path" not in gpu["placement"]
            if scheme == "fp16":  # its gathered tables kept float32: every operator on the GPU
                assert gpu["placement"]["cpu_ops"] == 0 and max(gpu["max_abs_diff"].values()) < 1e-4


def test_a_length_above_the_static_one_is_one_line(static_dir):
    result = CliRunner().invoke(main, ["quantize", str(static_dir / "model.onnx"), "--scheme", "int8-dynamic",
                                       "--seq-len", str(SEQ + 1), "--out", str(static_dir / "q.onnx")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"above the {SEQ} tokens the static file" in lines[0], lines
    assert not (static_dir / "q.onnx").exists()
