"""A Python child of albert-edge imports the same albert_edge as its parent, even when started in
a directory (a checkout) whose own albert_edge/ folder would shadow the installed package."""

from __future__ import annotations

import os
import subprocess

import pytest

from albert_edge.children import child_env, python


@pytest.fixture()
def checkout(tmp_path):
    """A working directory with an albert_edge/ folder of its own, as a source checkout has."""
    (tmp_path / "albert_edge").mkdir()
    (tmp_path / "albert_edge" / "__init__.py").write_text("raise ImportError('the checkout, not the install')\n")
    return tmp_path


@pytest.mark.parametrize("how", [("-c", "import albert_edge.converters"), ("-m", "albert_edge", "--version")])
def test_a_child_imports_the_parents_albert_edge(checkout, how):
    result = subprocess.run(python(*how), cwd=checkout, env=child_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_without_it_the_checkout_would_shadow_the_package(checkout):
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    result = subprocess.run(python("-c", "import albert_edge"), cwd=checkout, env=plain, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0 and "the checkout, not the install" in result.stderr


def test_extra_settings_yield_to_the_callers():
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    try:
        assert child_env(TF_CPP_MIN_LOG_LEVEL="2")["TF_CPP_MIN_LOG_LEVEL"] == "0"
    finally:
        del os.environ["TF_CPP_MIN_LOG_LEVEL"]
    assert child_env(TF_CPP_MIN_LOG_LEVEL="2")["TF_CPP_MIN_LOG_LEVEL"] == "2"
