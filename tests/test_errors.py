"""errors.optional_import: a missing package stays an ImportError the caller words; an interrupt
that lands while a compiled module initialises stays an interrupt."""

from __future__ import annotations

import sys

import pytest

from albert_edge.errors import optional_import, user_message


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
        "this command needs torch, which is not installed: pip install 'albert-edge[convert]'")
    assert user_message(ModuleNotFoundError("No module named 'something_else'", name="something_else")) is None
    # What Python raises for a package that is not installed, for torch alone.
    out = tmp_path / "out"
    done = cli_without("torch", "convert", "no-such-checkpoint", "--out", out, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "needs torch, which is not installed: pip install 'albert-edge[convert]'" in lines[0]
    assert not out.exists()
