"""The documentation's result tables are rendered from benchmarks/results, never typed: each block
between <!-- results:NAME --> markers in a page of docs/ equals what benchmarks/render_results.py
makes of the result files, and a changed figure in a result file changes the table."""

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


def test_the_pages_tables_are_the_rendered_result_files():
    renderer = _renderer()
    pages = renderer.pages()
    assert {p.relative_to(ROOT).as_posix() for p in pages} >= {"docs/guides/accelerators.md"}
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert renderer.render(text) == text, f"{page}: run python benchmarks/render_results.py"


def test_every_table_is_shown_on_a_page():
    renderer = _renderer()
    shown = {name for page in renderer.pages() for name in renderer.TABLES
             if f"<!-- results:{name} -->" in page.read_text(encoding="utf-8")}
    assert shown == set(renderer.TABLES)


def test_a_block_no_table_renders_is_an_error():
    with pytest.raises(SystemExit, match="no table renders"):
        _renderer().render("<!-- results:nothing -->\n<!-- /results:nothing -->\n")


@pytest.mark.parametrize("name, file", [("gpu_static", "gpu_static-albert-base.json"),
                                        ("onnx_partitions", "onnx_partitions-albert-base.json"),
                                        ("tokenizer_json_parity", "tokenizer_json_parity.json")])
def test_a_changed_result_changes_its_table(tmp_path, name, file, monkeypatch):
    renderer = _renderer()
    result = json.loads((renderer.RESULTS / file).read_text())
    result["commit"] = "f" * 40
    (tmp_path / file).write_text(json.dumps(result))
    monkeypatch.setattr(renderer, "RESULTS", tmp_path)
    assert "commit fffffff" in renderer.TABLES[name]()
