"""The device side imports and works with torch and tensorflow unavailable, as on a Raspberry Pi."""

from __future__ import annotations

import json
import pytest

DEVICE_MODULES = ["albert_edge", "albert_edge.config", "albert_edge.params", "albert_edge.errors",
                  "albert_edge.tokenizer", "albert_edge.runtime", "albert_edge.info", "albert_edge.cli",
                  "albert_edge.device", "albert_edge.profile", "albert_edge.profile._child",
                  "albert_edge.runtime.accelerator", "albert_edge.formats.kinds", "albert_edge.runtime.static",
                  "albert_edge.api"]

def test_blocker_really_blocks(run_blocked):
    result = run_blocked("import torch")
    assert result.returncode != 0 and "not installed on this device" in result.stderr


@pytest.mark.parametrize("module", DEVICE_MODULES)
def test_device_module_imports_without_torch_or_tensorflow(module, run_blocked):
    result = run_blocked(f"import importlib; importlib.import_module({module!r})")
    assert result.returncode == 0, result.stderr


def test_the_public_api_gives_the_device_side_without_torch(run_blocked):
    """albert_edge.api names both sides; on a device its device half works and a build-side name
    says torch is missing when it is asked for, not when the module is imported."""
    result = run_blocked("""
        from albert_edge.api import AlbertTokenizer, Session, profile, write_report
        import albert_edge.api as api
        try:
            api.build_model
        except ImportError as exc:
            print("build_model:", exc)
    """)
    assert result.returncode == 0, result.stderr
    assert "build_model: " in result.stdout and "not installed on this device" in result.stdout


def test_params_command_runs_without_torch(run_blocked):
    result = run_blocked("""
        import sys
        from albert_edge.cli import main
        sys.argv = ["albert-edge", "params", "albert-base-v2", "--json"]
        main()
    """)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["total"] == 11_683_584
