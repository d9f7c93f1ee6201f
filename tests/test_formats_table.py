"""The table of formats (albert_edge.formats.kinds) holds: each suffix is one entry's, each name
one entry, each identifier check takes its own files and refuses another format's with the line
the profiler has always given; and the device side asks the table instead of comparing a format's
name with a string, or checking TFLite's identifier by hand, anywhere but in the counted places."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from albert_edge.errors import RuntimeUnavailable
from albert_edge.formats import FORMATS, format_of
from albert_edge.formats.kinds import (ALL, EXECUTORCH, ONNX, ORT, TFLITE, VARIANTS, by_name, file_suffix, find,
                                       of_file, suffixes)

ROOT = Path(__file__).resolve().parents[1]

# What the profiler has said of a file without its format's identifier (profile/runner.py), word for word.
REFUSALS = {
    "onnx": "not an ONNX model",
    "ort": "not an ONNX Runtime .ort model (no ORTM identifier)",
    "tflite": "not a TFLite model (no TFL3 identifier)",
    "executorch": "not an ExecuTorch program (no ET12 identifier)",
}


def _flatbuffer(identifier: bytes) -> bytes:
    """An empty table finished with ``identifier``, as flatc-generated writers finish a file."""
    flatbuffers = pytest.importorskip("flatbuffers")
    builder = flatbuffers.Builder(64)
    builder.StartObject(0)
    builder.Finish(builder.EndObject(), file_identifier=identifier)
    return bytes(builder.Output())


def _onnx() -> bytes:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return helper.make_model(graph).SerializeToString()


HEADS = {
    "onnx": _onnx,
    "ort": lambda: _flatbuffer(b"ORTM"),
    "tflite": lambda: _flatbuffer(b"TFL3"),
    "executorch": lambda: _flatbuffer(b"ET12"),
}


def test_every_suffix_is_one_entry_and_every_name_one_entry():
    assert [f.name for f in ALL] == ["onnx", "tflite", "executorch", "ort"]
    seen = [s for f in ALL for s in f.suffixes]
    assert len(seen) == len(set(seen)) and suffixes() == tuple(seen) == (".onnx", ".tflite", ".pte", ".ort")
    for fmt in ALL:
        assert by_name(fmt.name) is fmt and fmt.suffix == fmt.suffixes[0]
        for suffix in fmt.suffixes:
            assert of_file(f"a/model{suffix}") is fmt and of_file(f"a/MODEL{suffix.upper()}") is fmt
            assert find(f"m{suffix}") is fmt and format_of(f"m{suffix}") == fmt.name == FORMATS[suffix]
    assert find("model.bin") is None


def test_an_unknown_suffix_is_one_line_listing_them():
    with pytest.raises(RuntimeUnavailable, match=re.escape(
            "model.bin: unknown model file type '.bin'; expected .onnx, .tflite, .pte, .ort")):
        of_file("model.bin")
    with pytest.raises(RuntimeUnavailable, match="'[(]no suffix[)]'"):
        of_file("model")
    with pytest.raises(KeyError, match="unknown model format 'safetensors'"):
        by_name("safetensors")


def test_variants_are_their_container_and_the_converters_agree():
    """mediapipe, onnx-text and transformers-js are read and run as the format their target names."""
    assert by_name("mediapipe") is TFLITE and by_name("onnx-text") is ONNX and by_name("transformers-js") is ONNX
    assert file_suffix("mediapipe") == ".mediapipe.tflite" and file_suffix("tflite") == ".tflite"
    for variant in VARIANTS:
        assert variant.suffix.endswith(variant.format.suffix) and of_file("m" + variant.suffix) is variant.format
    targets = pytest.importorskip("albert_edge.converters.targets").TARGETS
    assert set(targets) == {f.name for f in ALL} | {v.name for v in VARIANTS}
    for target in targets.values():
        fmt = by_name(target.format)
        assert fmt.name == target.format and by_name(target.name) is fmt and of_file(target.file_name) is fmt
        assert file_suffix(target.name) == target.suffix


@pytest.mark.parametrize("fmt", ALL, ids=lambda f: f.name)
def test_the_identifier_check_takes_its_files_and_refuses_the_others(fmt, tmp_path):
    assert fmt.identifier.refusal == REFUSALS[fmt.name]
    own = tmp_path / f"own{fmt.suffix}"
    own.write_bytes(HEADS[fmt.name]())
    assert fmt.identifies(own.read_bytes()) and fmt.identifies(own.read_bytes()[:8])
    fmt.check_identifier(own)
    for other in ALL:
        if other is fmt:
            continue
        path = tmp_path / f"{other.name}{fmt.suffix}"
        path.write_bytes(HEADS[other.name]())
        assert not fmt.identifies(path.read_bytes())
        with pytest.raises(RuntimeUnavailable) as raised:
            fmt.check_identifier(path)
        assert str(raised.value) == f"{path}: {REFUSALS[fmt.name]}"
    # An empty file, and one cut off before its identifier ends, are refused too.
    assert not fmt.identifies(b"") and not fmt.identifies(b"\x00\x00\x00\x00" + fmt.identifier.magic[:-1])


def test_what_the_branches_used_to_ask():
    """The facts that replaced comparisons of a name, entry by entry."""
    assert [f.name for f in ALL if f.onnxruntime] == ["onnx", "ort"]
    assert [f.name for f in ALL if f.gpu] == ["onnx", "tflite", "ort"]
    assert [f.name for f in ALL if f.gpu_placement] == ["tflite"]
    assert [f.name for f in ALL if f.nnapi_coreml] == ["onnx", "ort"]
    assert [f.name for f in ALL if f.partitions_checked] == ["onnx"]
    assert [f.name for f in ALL if not f.static_shapes] == ["executorch"]
    assert [f.name for f in ALL if f.sized_at_run_time] == ["tflite"]
    assert [f.name for f in ALL if f.op_versions] == ["tflite"]
    assert {f.name: f.version_key for f in ALL} == {"onnx": "opset", "tflite": "schema_version",
                                                   "executorch": "schema_version", "ort": "schema_version"}
    assert ORT.min_runtime_key == "min_onnxruntime" and [f.name for f in ALL if f.min_runtime_key] == ["ort"]
    assert [f.name for f in ALL if f.weights_reader] == ["onnx", "tflite"]
    assert [f.name for f in ALL if f.precision_note] == ["executorch", "ort"]
    assert [f.name for f in ALL if f.structure_check] == ["tflite", "ort"]
    assert [f.name for f in ALL if f.may_take_text] == ["onnx"] and [f.name for f in ALL if f.may_carry_task] == ["tflite"]
    assert [f.name for f in ALL if f.takes_delegates] == ["tflite", "executorch"]
    assert [f.name for f in ALL if f.browser] == ["onnx", "ort"]
    assert {f.name: f.cpu_kernels for f in ALL} == {"onnx": "MLAS", "tflite": "XNNPACK", "executorch": "XNNPACK",
                                                   "ort": "MLAS"}
    assert EXECUTORCH.packages == ("executorch_numpy_runtime", "executorch")
    assert TFLITE.packages == ("ai_edge_litert", "tflite_runtime", "tensorflow") and ORT.packages == ("onnxruntime",)


# -- what the device side still compares or checks by hand ------------------------------------------

# Names that a comparison with a string literal would be branching on.
NAMES = {"onnx", "ort", "tflite", "executorch", "mediapipe", "onnx-text", "transformers-js", "pte", "static"}
DEVICE = ["albert_edge/formats", "albert_edge/runtime", "albert_edge/profile", "albert_edge/report",
          "albert_edge/device", "demo_app", "albert_edge/info.py", "albert_edge/cli/info.py", "albert_edge/tokenizer.py",
          "albert_edge/config.py", "albert_edge/files.py", "albert_edge/text.py"]
SHIPPED = ["albert_edge", "converters", "quantize", "demo_app"]
# The most the tree may hold (54 before the table): what is left is the report's snippets, app
# lines and tables, which compare a record's or a framework's name, not a file's.
MAX_NAME_COMPARISONS = 5
MAX_TFLITE_IDENTIFIER_CHECKS = 0  # every reader asks formats.identifiers


def _files(root: Path, places: list[str]) -> list[Path]:
    out = []
    for place in places:
        path = root / place
        out += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return out


def _literals(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.Set, ast.List)):
        return [v for e in node.elts for v in _literals(e)]
    return []


def name_comparisons(root: Path, places: list[str] = DEVICE) -> list[str]:
    """Each ``==``, ``!=``, ``in`` or ``not in`` of a format's name with a string literal (or a
    tuple, set or list of them), and each ``case "tflite":``, as 'file:line'."""
    found = []
    for path in _files(root, places):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                for op, right in zip(node.ops, node.comparators):
                    if (isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                            and (set(_literals(right)) | set(_literals(node.left))) & NAMES):
                        found.append(f"{path.relative_to(root)}:{node.lineno}")
            elif isinstance(node, ast.match_case) and set(_literals(getattr(node.pattern, "value", None))) & NAMES:
                found.append(f"{path.relative_to(root)}:{node.pattern.lineno}")
    return found


def tflite_identifier_checks(root: Path, places: list[str] = SHIPPED) -> list[str]:
    """Each line comparing bytes with TFLite's identifier by hand, as 'file:line'."""
    return [f"{path.relative_to(root)}:{i}" for path in _files(root, places)
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r'[!=]=\s*b"TFL3"', line)]


def test_the_device_side_asks_the_table_instead_of_comparing_names():
    found = name_comparisons(ROOT)
    assert len(found) <= MAX_NAME_COMPARISONS, found
    assert not [f for f in found if not f.startswith(("albert_edge/report/snippets.py",
                                                      "albert_edge/report/app_lines.py",
                                                      "albert_edge/report/tables.py"))], found


def test_tflite_identifier_is_checked_by_hand_in_one_place_at_most():
    assert len(tflite_identifier_checks(ROOT)) <= MAX_TFLITE_IDENTIFIER_CHECKS


def test_the_counts_find_what_they_count(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        'if fmt == "tflite":\n    pass\n'
        'x = fmt in ("onnx", "ort")\n'
        'y = "executorch" != kind\n'
        'match fmt:\n    case "pte":\n        pass\n'
        'ok = fmt == "fp32" or kind.onnxruntime\n'
        'if raw[4:8] != b"TFL3":\n    pass\n'
        'z = head[4:8] == b"TFL3"\n')
    assert name_comparisons(tmp_path, ["pkg"]) == ["pkg/m.py:1", "pkg/m.py:3", "pkg/m.py:4", "pkg/m.py:6"]
    assert tflite_identifier_checks(tmp_path, ["pkg"]) == ["pkg/m.py:9", "pkg/m.py:11"]
