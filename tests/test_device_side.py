"""The device side imports and works with torch and tensorflow unavailable, as on a Raspberry Pi."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

DEVICE_MODULES = ["albert_edge", "albert_edge.config", "albert_edge.params", "albert_edge.errors",
                  "albert_edge.tokenizer", "albert_edge.runtime", "albert_edge.info", "albert_edge.cli"]

BLOCKER = textwrap.dedent("""
    import importlib.abc, sys

    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "tensorflow", "transformers", "tf_keras", "keras"):
                raise ImportError(f"{name} is not installed on this device")
            return None

    sys.meta_path.insert(0, Blocked())
""")


def run_blocked(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120)


def test_blocker_really_blocks():
    result = run_blocked("import torch")
    assert result.returncode != 0 and "not installed on this device" in result.stderr


@pytest.mark.parametrize("module", DEVICE_MODULES)
def test_device_module_imports_without_torch_or_tensorflow(module):
    result = run_blocked(f"import importlib; importlib.import_module({module!r})")
    assert result.returncode == 0, result.stderr


def test_params_command_runs_without_torch():
    result = run_blocked("""
        import sys
        from albert_edge.cli import main
        sys.argv = ["albert-edge", "params", "albert-base-v2", "--json"]
        main()
    """)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["total"] == 11_683_584
