"""The target registry: every entry is complete, and each part it names is really there: the
exporter loads, takes the options the entry lists, verifies, and makes the quantized forms it
claims; the file it writes is read back and run by the device side as the entry's format."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

from albert_edge.converters.targets import TARGETS, Exporter, Lazy, of_file, target
from albert_edge.errors import ConversionError
from albert_edge.formats import FORMATS
from albert_edge.formats.kinds import by_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(TARGETS))
def test_each_entry_is_complete(name):
    entry = TARGETS[name]
    assert entry.name == name and entry.file_name == "model" + entry.suffix
    # The device side reads and runs the file by its last suffix, as the entry's format.
    assert FORMATS[Path(entry.file_name).suffix] == entry.format
    assert by_name(entry.format).name == entry.format and by_name(entry.format).reader and by_name(entry.format).engines
    assert of_file(Path("out") / entry.file_name) is entry
    exporter = entry.exporter()
    assert isinstance(exporter, Exporter) and callable(exporter.export) and callable(exporter.verify)
    # Every option convert() hands the exporter is a parameter of its export (the scheme goes to
    # the quantized form instead).
    params = inspect.signature(exporter.export).parameters
    assert "seq_len" in params
    for option in entry.options:
        assert option == "scheme" or option in params, f"{name}: export() takes no {option}"
    # A target that makes quantized forms at conversion takes --scheme, and only then.
    assert ("scheme" in entry.options) == bool(entry.schemes) == (exporter.quantized is not None)
    if exporter.quantized is not None:
        assert {"tokenizer", "seq_len"} <= set(inspect.signature(exporter.quantized).parameters)


@pytest.mark.parametrize("name", list(TARGETS))
def test_the_extra_named_is_one_the_package_declares(name):
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert TARGETS[name].extra in extras


def test_listing_the_targets_imports_no_exporter():
    """The registry is read by the CLI on every start: only a target asked for is imported."""
    import subprocess

    code = ("import sys; import albert_edge.converters.targets as t; list(t.TARGETS.values()); "
            "print(sorted(m for m in sys.modules if m.startswith('albert_edge.converters.') or m in "
            "('torch', 'tensorflow', 'onnx')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["albert_edge.converters.targets", "albert_edge.converters.verify"]


def test_an_unknown_target_or_file_is_one_line():
    with pytest.raises(ConversionError, match="unknown target 'coreml'; choose from onnx, tflite"):
        target("coreml")
    with pytest.raises(ConversionError, match="not a file of any target"):
        of_file("model.mlpackage")


def test_a_missing_exporter_names_the_target():
    def missing():
        import albert_edge_no_such_exporter  # noqa: F401

    broken = TARGETS["onnx"].__class__("broken", ".onnx", "onnx", "convert", Lazy(missing))
    with pytest.raises(ConversionError, match="the broken exporter is not available: No module named"):
        broken.exporter()
