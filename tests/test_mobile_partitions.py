"""`albert-edge inspect --partitions`: onnxruntime's own mobile checker on a file, as a table and in
--json; an .ort is refused in one line; the check runs on the device side, with no torch."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from albert_edge.cli import main

pytest.importorskip("onnxruntime")

N = 8


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory):
    import torch

    from albert_edge.config import AlbertConfig
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("partitions") / "out"
    convert(build_model(AlbertConfig.preset("tiny"), "base"), out, targets=("onnx", "ort"), seq_len=N, static=True)
    return out


def test_inspect_partitions_json(static_dir):
    result = CliRunner().invoke(main, ["inspect", str(static_dir / "model.onnx"), "--partitions", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["partitions"]
    assert report["dynamic_inputs"] == [] and report["optimization"] == "basic"
    by_name = {p["provider"]: p for p in report["providers"]}
    assert set(by_name) == {"NNAPI", "CoreML MLProgram", "CoreML NeuralNetwork"}
    nnapi, core_ml = by_name["NNAPI"], by_name["CoreML MLProgram"]
    assert (nnapi["partitions"], nnapi["coverage"], nnapi["unsupported"]) == (1, 1.0, [])
    assert core_ml["partitions"] == 1
    assert core_ml["unsupported"] == [{"op": "ai.onnx:Gather", "nodes": 2,
                                       "reason": "operator not in the provider's list"}]


def test_inspect_partitions_table(static_dir):
    result = CliRunner().invoke(main, ["inspect", str(static_dir / "model.onnx"), "--partitions"])
    assert result.exit_code == 0, result.output
    assert "NPU partitions" in result.output and "NNAPI" in result.output
    assert "ai.onnx:Gather x2 (operator not in the provider's list)" in " ".join(result.output.split())  # wrapped
    plain = CliRunner().invoke(main, ["inspect", str(static_dir / "model.onnx")])
    assert plain.exit_code == 0 and "NPU partitions" not in plain.output


def test_an_ort_is_refused_in_one_line(static_dir):
    result = CliRunner().invoke(main, ["inspect", str(static_dir / "model.ort"), "--partitions"])
    assert result.exit_code == 2
    assert "reads .onnx files only" in result.output and len(result.output.strip().splitlines()) == 1


def test_the_check_needs_no_torch(static_dir, run_blocked):
    done = run_blocked(f"""
        from albert_edge.formats.mobile_partitions import mobile_partitions
        report = mobile_partitions({str(static_dir / "model.onnx")!r})
        print(report.provider("NNAPI").partitions, attempts)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "[]"]


@pytest.mark.parametrize("suffix", [".tflite", ".pte"])
def test_a_file_of_another_format_is_refused_by_name(tmp_path, suffix):
    """Not onnxruntime's INVALID_PROTOBUF: the line says what --partitions reads."""
    from albert_edge.errors import RuntimeUnavailable
    from albert_edge.formats.mobile_partitions import mobile_partitions

    path = tmp_path / f"model{suffix}"
    path.write_bytes(b"\0\0\0\0" + bytes(64))
    with pytest.raises(RuntimeUnavailable) as raised:
        mobile_partitions(path)
    message = str(raised.value)
    assert message.startswith(f"model{suffix}: --partitions shows how onnxruntime's NPU providers would split an "
                              f".onnx, and this is a {suffix} file"), message
    assert "PROTOBUF" not in message
