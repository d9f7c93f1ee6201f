"""errors.optional_import: a missing package stays an ImportError the caller words; an interrupt
that lands while a compiled module initialises stays an interrupt."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from albert_edge.errors import install_line, optional_import, user_message


@pytest.fixture
def modules(tmp_path, monkeypatch):
    # What pybind11 raises when Ctrl-C or SIGTERM arrives during its module's initialisation
    # (seen with onnxruntime: "ImportError: initialization failed", the interrupt as its cause).
    (tmp_path / "interrupted_ext.py").write_text(
        "raise ImportError('initialization failed') from KeyboardInterrupt()\n")
    (tmp_path / "broken_ext.py").write_text("raise ImportError('libfoo.so: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("interrupted_ext", "broken_ext"):
        sys.modules.pop(name, None)


def test_an_interrupted_import_is_the_interrupt(modules):
    with pytest.raises(KeyboardInterrupt):
        optional_import("interrupted_ext")


def test_a_missing_or_broken_package_is_an_import_error(modules):
    with pytest.raises(ImportError, match="libfoo"):
        optional_import("broken_ext")
    with pytest.raises(ImportError):
        optional_import("no_such_package_anywhere")
    assert optional_import("json") is sys.modules["json"]


def test_a_missing_package_of_an_extra_names_the_extra(tmp_path, cli_without):
    """A device-side install (no torch) running a build-side command: one line naming the extra,
    exit 2, not an internal error."""
    assert user_message(ModuleNotFoundError("No module named 'torch'", name="torch")) == (
        f"this command needs torch, which is not installed: {install_line('convert')}")
    assert user_message(ModuleNotFoundError("No module named 'something_else'", name="something_else")) is None
    # What Python raises for a package that is not installed, for torch alone.
    out = tmp_path / "out"
    done = cli_without("torch", "convert", "no-such-checkpoint", "--out", out, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"needs torch, which is not installed: {install_line('convert')}" in lines[0]
    assert not out.exists()


# albert_edge/report/ words its matplotlib line itself until the report's own change takes the constant.
_OWN_WORDING = {"albert_edge/report/charts.py"}


def test_every_install_line_in_the_code_is_the_one_wording():
    """albert-edge is not on the package index: a message or --help text that says how to install
    an extra takes install_line(), which says to install from a clone, so no source file spells a
    `pip install` of albert-edge or of the clone itself."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "converters").is_dir():
        pytest.skip("the source folders are in the repository, not in the installed package")
    spelled = [f"{path.relative_to(root)}: {m}" for folder in ("albert_edge", "converters", "quantize", "demo_app")
               for path in sorted((root / folder).rglob("*.py")) if path.relative_to(root).as_posix() not in _OWN_WORDING
               for m in re.findall(r"pip install '?(?:albert-edge|\.\[)[^\"\n]*", path.read_text(encoding="utf-8"))
               if path != root / "albert_edge" / "errors.py"]
    assert not spelled, "\n".join(spelled)
    assert install_line("onnx", "tflite") == "pip install '.[onnx,tflite]' -c constraints.txt (in a clone of albert-edge)"
