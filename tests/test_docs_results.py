"""The documentation's result tables are rendered from benchmarks/results, never typed: each block
between <!-- results:NAME --> markers in a page of docs/ equals what benchmarks/render_results.py
makes of the result files, and a changed figure in a result file changes the table."""

from __future__ import annotations

import importlib.util
import json
import re
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
    recorded = {f"recorded/{p.stem}" for p in renderer.RECORDED.glob("*.json")}
    shown = {name for page in renderer.pages() for name in {*renderer.TABLES, *recorded}
             if f"<!-- results:{name} -->" in page.read_text(encoding="utf-8")}
    assert shown == set(renderer.TABLES) | recorded


# A measured figure in a table cell: a time or a size with its unit, or a ratio or cosine written
# to three or more places (a version such as 0.10.21 is neither).
_MEASURED = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*\s?(?:ms|us|µs|s|MiB|GiB|KiB|MB|GB|kB)\b"
                       r"|(?<![\w.])[01]\.\d{3,}(?![\d.])")


def hand_written_tables(text: str) -> list[tuple[int, str]]:
    """(line, header) of each Markdown table in ``text`` outside a results block whose cells hold a
    measured figure."""
    found, inside, table = [], False, []
    for number, line in enumerate([*text.splitlines(), ""], 1):
        if line.startswith("<!-- results:"):
            inside = True
        elif line.startswith("<!-- /results:"):
            inside = False
        if line.startswith("|") and not inside:
            table.append((number, line))
            continue
        if table and any(_MEASURED.search(row) for _, row in table[2:]):
            found.append(table[0])
        table = []
    return found


def test_no_page_holds_a_hand_written_table_of_measured_figures():
    """Latency, memory, size and ratio tables come from result files (a results block), never typed."""
    typed = [f"{page.relative_to(ROOT)}:{line}: {header[:80]}" for page in sorted((ROOT / "docs").rglob("*.md"))
             for line, header in hand_written_tables(page.read_text(encoding="utf-8"))]
    readme = [f"{page.relative_to(ROOT)}:{line}: {header[:80]}"
              for page in (ROOT / "README.md", *_renderer().README_PAGES)
              for line, header in hand_written_tables(page.read_text(encoding="utf-8"))]
    assert not typed + readme, "tables of measured figures typed by hand: put them in a result file\n" + "\n".join(
        typed + readme)


@pytest.mark.parametrize("table, typed", [
    ("| file | p50 |\n|---|---|\n| a | 6.90 ms |\n", True),
    ("| ratio | measured |\n|---|---|\n| int8 | 0.871 / 0.922 |\n", True),
    ("| peak |\n|---|\n| 61.5 MiB |\n", True),
    ("| install | brings |\n|---|---|\n| mobile | mediapipe 0.10.21 |\n", False),
    ("<!-- results:x -->\n| p50 |\n|---|\n| 6.90 ms |\n<!-- /results:x -->\n", False),
])
def test_what_counts_as_a_hand_written_measured_table(table, typed):
    assert bool(hand_written_tables(table)) is typed


def test_a_block_no_table_renders_is_an_error():
    with pytest.raises(SystemExit, match="no table renders"):
        _renderer().render("<!-- results:nothing -->\n<!-- /results:nothing -->\n")


@pytest.mark.parametrize("name, file", [("gpu_static", "gpu_static-albert-base.json"),
                                        ("onnx_partitions", "onnx_partitions-albert-base.json"),
                                        ("tokenizer_json_parity", "tokenizer_json_parity.json"),
                                        ("peers_ratios", "peers.json"), ("peers_files", "peers.json"),
                                        ("peers_executorch", "peers.json"), ("pipeline_latency", "pipeline.json"),
                                        ("pipeline_run", "pipeline.json")])
def test_a_changed_result_changes_its_table(tmp_path, name, file, monkeypatch):
    renderer = _renderer()
    result = json.loads((renderer.RESULTS / file).read_text())
    result["commit"] = "f" * 40
    (tmp_path / file).write_text(json.dumps(result))
    monkeypatch.setattr(renderer, "RESULTS", tmp_path)
    assert "commit fffffff" in renderer.TABLES[name]()


@pytest.mark.parametrize("value, spread, verdict", [(0.48, [0.47, 0.49], "met"), (0.96, [0.95, 1.01], "not met"),
                                                    (0.79, [0.75, 0.83], "within the rounds' spread"),
                                                    (0.5, None, "met"), (0.81, None, "not met")])
def test_a_target_inside_the_rounds_range_is_neither_met_nor_missed(value, spread, verdict):
    assert _renderer()._verdict(value, spread, 0.8) == verdict


def test_a_recorded_table_says_it_was_transcribed_and_when():
    renderer = _renderer()
    for path in sorted(renderer.RECORDED.glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        text = renderer.recorded(path.stem)
        assert f"at commit {result['commit'][:7]} ({result['date'][:10]})" in text and "not measured again" in text
        assert ("History, superseded." in text) == (result.get("status") == "history"), path.name
        assert all(len(row) == len(result["columns"]) for row in result["rows"]), path.name
