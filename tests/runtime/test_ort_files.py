"""ONNX Runtime .ort files on the device side: read back without onnxruntime (the same structure
onnxruntime's own generated bindings see), run by Session with no torch, inspected and profiled
like .onnx files, and a damaged file or one of another model is one line."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.errors import ConversionError
from albert_edge.formats import ort_reader
from albert_edge.formats.graph import INPUT_NAMES
from albert_edge.formats.weights import inspect_file, model_param_bytes
from albert_edge.runtime import Session

FAST = ("--runs", "5", "--warmup", "1", "--min-seconds", "0", "--threads", "1")
# the progress lines profile prints on stderr when it is not a terminal
PROGRESS = ("profiling ", "[profile ")


@pytest.fixture(scope="module")
def ort_file(tmp_path_factory):
    """model.ort of the tiny base model (L=4, G=2), as `convert --to ort` writes it."""
    pytest.importorskip("torch")
    from albert_edge.converters.export import convert

    from ..converters.conftest import tiny_model

    model = tiny_model()
    out = tmp_path_factory.mktemp("ort") / "out"
    convert(model, out, targets=("ort",), seq_len=16)
    return model, out / "model.ort"


def _feeds(T: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(T).integers(5, 99, size=(2, T), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def test_each_weight_is_read_back_once(ort_file):
    model, path = ort_file
    contents, report = inspect_file(path, model=model)
    assert report.duplicates == [] and report.stored_bytes == report.unique_bytes and report.ok
    params = model_param_bytes(model)
    assert params <= report.stored_bytes <= 1.01 * params
    assert [s.name for s in contents.inputs] == list(INPUT_NAMES)
    assert all(s.dtype == "int64" and s.shape == ("batch", "sequence") for s in contents.inputs)
    assert [(s.name, s.shape) for s in contents.outputs] == [("last_hidden_state", ("batch", "sequence", 16)),
                                                              ("pooler_output", ("batch", 16))]


def test_the_reader_agrees_with_onnxruntimes_bindings(ort_file):
    """Names, shapes, bytes of every initializer, and every node's operator, as onnxruntime's
    generated flatbuffer classes read them."""
    pytest.importorskip("flatbuffers")
    import onnxruntime

    sys.path.append(str(Path(onnxruntime.__file__).parent / "tools" / "ort_format_model"))
    from ort_flatbuffers_py.fbs.InferenceSession import InferenceSession

    _, path = ort_file
    raw = path.read_bytes()
    graph = InferenceSession.GetRootAsInferenceSession(raw, 0).Model().Graph()
    theirs = {}
    for i in range(graph.InitializersLength()):
        t = graph.Initializers(i)
        theirs[t.Name().decode()] = (tuple(t.DimsAsNumpy().tolist()), t.RawDataAsNumpy().tobytes())
    ours = {w.name: (w.shape, w.data.tobytes()) for w in ort_reader.read(path).weights}
    assert ours == theirs
    ops = sorted(graph.Nodes(i).OpType().decode() for i in range(graph.NodesLength()))
    assert sorted(ort_reader.read(path).ops.elements()) == ops


def test_session_runs_it_as_the_onnx_engine_does(ort_file):
    import torch

    model, path = ort_file
    session = Session(path, num_threads=1)
    assert session.format == "ort" and session.backend_name == "onnxruntime"
    feeds = _feeds(9)
    got = session.run(feeds)
    with torch.no_grad():
        want = model(*(torch.from_numpy(feeds[k]) for k in INPUT_NAMES))
    for name, expected in zip(model.output_names, want):
        assert float(np.abs(got[name] - expected.numpy()).max()) <= 1e-4


def test_the_device_side_reads_and_runs_it_without_torch(ort_file, run_blocked):
    _, path = ort_file
    result = run_blocked(f"""
        import numpy as np
        from albert_edge.formats.weights import inspect_file
        from albert_edge.runtime import Session
        contents, report = inspect_file({str(path)!r})
        ids = np.arange(6, dtype=np.int64).reshape(1, 6) + 5
        out = Session({str(path)!r}).run({{"input_ids": ids, "attention_mask": np.ones_like(ids),
                                            "token_type_ids": np.zeros_like(ids)}})
        print("ran", out["last_hidden_state"].shape, len(report.duplicates), "torch" in sys.modules)
        print("attempts", attempts)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ran (1, 6, 16) 0 False" in result.stdout and "attempts []" in result.stdout


def test_inspect_json_and_table(ort_file):
    _, path = ort_file
    result = CliRunner().invoke(main, ["inspect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["format"] == "ort" and data["duplicates"] == [] and data["within_bound"] is True
    assert data["ort"]["ort_format_version"] and data["ort"]["nodes"] == sum(data["ops"].values())
    assert data["precision"]["weight_bytes_by_dtype"]["float32"] > 0
    table = CliRunner().invoke(main, ["inspect", str(path)])
    assert table.exit_code == 0 and "ONNX Runtime format" in table.output


def test_info_describes_an_ort(ort_file):
    _, path = ort_file
    result = CliRunner().invoke(main, ["info", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["format"] == "ort" and data["file_bytes"] == path.stat().st_size


def test_profile_records_an_ort(ort_file):
    _, path = ort_file
    result = CliRunner().invoke(main, ["profile", str(path), "--seq-len", "8", *FAST, "--json"])
    assert result.exit_code == 0, result.output
    [record] = json.loads(result.stdout)
    assert record["format"] == "ort" and record["runtime"] == "onnxruntime"
    assert record["provider"] == "CPUExecutionProvider"
    assert record["memory"]["peak_after_timed"] >= record["memory"]["after_load_rss"] > 0


def _damaged(good: Path, tmp_path: Path, case: str) -> Path:
    raw = bytearray(good.read_bytes())
    if case == "truncated":
        raw = raw[: len(raw) // 2]
    elif case == "wrong-magic":
        raw[4:8] = b"TFL3"
    elif case == "empty":
        raw = bytearray()
    elif case == "zeros":
        raw = bytearray(len(raw))
    elif case == "text":
        raw = bytearray(b"not a model at all\n" * 10)
    elif case == "root-offset":
        raw[0:4] = (len(raw) + 100).to_bytes(4, "little")
    out = tmp_path / f"{case}.ort"
    out.write_bytes(bytes(raw))
    return out


@pytest.mark.parametrize("case", ["truncated", "wrong-magic", "empty", "zeros", "text", "root-offset"])
def test_a_damaged_file_is_one_line_exit_2(ort_file, tmp_path, case):
    bad = _damaged(ort_file[1], tmp_path, case)
    with pytest.raises(ConversionError):
        inspect_file(bad)
    for command in (["inspect", str(bad)], ["profile", str(bad), "--seq-len", "8", *FAST]):
        result = subprocess.run([sys.executable, "-m", "albert_edge", *command], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 2, result.stderr
        lines = [line for line in result.stderr.strip().splitlines() if not line.startswith(PROGRESS)]
        assert len(lines) == 1 and bad.name in lines[0] and lines[0].startswith("Error: "), result.stderr
        assert result.stdout == ""


def test_random_damage_never_crashes_the_reader(ort_file, tmp_path):
    """Bytes flipped anywhere in the file: read back, or one ValueError."""
    raw = ort_file[1].read_bytes()
    rng = random.Random(0)
    failed = 0
    for i in range(150):
        data = bytearray(raw)
        for _ in range(3):
            at = rng.randrange(8, len(raw))
            data[at] = rng.randrange(256)
        path = tmp_path / f"flipped{i}.ort"
        path.write_bytes(bytes(data))
        try:
            ort_reader.read(path)
        except ValueError as exc:
            failed += 1
            assert "\n" not in str(exc)
    assert failed > 0  # the damage was seen at least sometimes


def test_an_ort_of_another_model_is_one_line(tmp_path):
    """A valid .ort whose graph is not an ALBERT (one Add of two float inputs): read back, and
    refused by profile in one line naming what it lacks."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from albert_edge.converters.ort import to_ort

    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "add",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "ab"],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    source = tmp_path / "add.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(source))
    other = to_ort(source, tmp_path / "add.ort")
    assert [s.name for s in ort_reader.read(other).inputs] == ["a", "b"]
    result = subprocess.run([sys.executable, "-m", "albert_edge", "profile", str(other), "--seq-len", "8", *FAST],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith(PROGRESS)]
    assert len(lines) == 1 and "add.ort" in lines[0] and "input_ids" in lines[0], result.stderr


def test_session_refuses_damage_in_one_line_and_prints_nothing(ort_file, tmp_path, capfd):
    """Bytes flipped anywhere: Session loads the file or raises RuntimeUnavailable, and nothing
    reaches stdout (onnxruntime announces a failed load's retry there)."""
    from albert_edge.errors import RuntimeUnavailable

    raw = ort_file[1].read_bytes()
    rng = random.Random(1)
    refused = Counter()
    for i in range(300):
        data = bytearray(raw)
        for _ in range(3):
            data[rng.randrange(8, len(raw))] = rng.randrange(256)
        path = tmp_path / f"flipped{i}.ort"
        path.write_bytes(bytes(data))
        try:
            Session(path)
        except RuntimeUnavailable as exc:
            refused["onnxruntime" if "onnxruntime cannot load it" in str(exc) else "check"] += 1
            assert "\n" not in str(exc) and path.name in str(exc)
    assert refused["check"] > 0 and refused["onnxruntime"] > 0, refused  # both refusals were exercised
    assert capfd.readouterr().out == ""


def test_the_check_before_loading_reads_no_weight(ort_file, tmp_path):
    """check_ort finds a file cut inside its weights from the tables alone, and passes the whole file."""
    from albert_edge.errors import RuntimeUnavailable

    _, path = ort_file
    ort_reader.check_ort(path)
    cut = tmp_path / "cut.ort"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size - 2000])
    with pytest.raises(RuntimeUnavailable, match="cut.ort"):
        ort_reader.check_ort(cut)


def test_the_oldest_onnxruntime_is_read_from_the_opset_and_kernels(ort_file):
    """An fp32 .ort of opset 20 claims 1.17.0; the ONNX Gelu of opset 20 (kept by int8 files)
    needs 1.18.0; an opset not measured is unknown (tests/ortoldest loads them in that release)."""
    from albert_edge.formats.ort_runtime import min_onnxruntime

    _, path = ort_file
    meta = ort_reader.read(path).metadata
    assert meta["opset"] == 20 and meta["min_onnxruntime"] == "1.17.0"
    manifest = json.loads((path.parent / "manifest.json").read_text())
    assert {f["name"]: f["min_runtime"] for f in manifest["files"]} == {"model.ort": "1.17.0"}
    assert min_onnxruntime(20, [("ai.onnx", "Gelu", 20), ("com.microsoft", "FusedMatMul", 1)]) == "1.18.0"
    assert min_onnxruntime(17, [("ai.onnx", "MatMul", 13)]) == "1.17.0"
    assert min_onnxruntime(21, []) is None and min_onnxruntime(None, []) is None
