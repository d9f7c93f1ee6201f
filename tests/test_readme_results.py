"""README.md's result tables are rendered from benchmarks/results, never typed: each block between
<!-- results:NAME --> markers equals what benchmarks/render_results.py makes of the result files,
and a changed figure in a result file changes the table."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _renderer():
    spec = importlib.util.spec_from_file_location("render_results", ROOT / "benchmarks" / "render_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_tables_are_the_rendered_result_files():
    renderer = _renderer()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert renderer.render(text) == text, "run python benchmarks/render_results.py"


@pytest.mark.parametrize("name, file", [("gpu_static", "gpu_static-albert-base.json"),
                                        ("onnx_partitions", "onnx_partitions-albert-base.json")])
def test_a_changed_result_changes_its_table(tmp_path, name, file, monkeypatch):
    renderer = _renderer()
    result = json.loads((renderer.RESULTS / file).read_text())
    result["commit"] = "f" * 40
    (tmp_path / file).write_text(json.dumps(result))
    monkeypatch.setattr(renderer, "RESULTS", tmp_path)
    assert "commit fffffff" in renderer.TABLES[name]()
