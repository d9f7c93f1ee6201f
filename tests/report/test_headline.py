"""One headline latency percentile everywhere: `profile`'s table, the report's tables, its
answer and chart, and the docs lead with the p50 and show the p90 beside it."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from albert_edge.cli import _output
from albert_edge.cli._profile_print import print_measured
from albert_edge.profile.record import HEADLINE, TAIL
from albert_edge.report import tables, write_report

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_headline_is_the_p50():
    assert (HEADLINE, TAIL) == ("p50", "p90")


def test_the_docs_name_the_same_headline_and_say_why():
    profiling = (DOCS / "profiling.md").read_text()
    assert re.search(r"The headline is the p50\*\*.*typically waits", profiling, re.S)
    for page in DOCS.rglob("*.md"):
        text = " ".join(page.read_text().split())
        other = re.search(rf"{TAIL} \(the headline|{TAIL} is the headline|headline is the {TAIL}", text)
        assert other is None, f"{page.name} calls another percentile the headline: {other[0]!r}"


def test_profile_table_leads_with_it(profile_json, monkeypatch):
    buffer = io.StringIO()
    monkeypatch.setattr(_output, "console", Console(file=buffer, width=200, markup=False))
    print_measured(json.loads(profile_json.read_text()), [], None)
    text = buffer.getvalue()
    assert f"{HEADLINE} is the headline, {TAIL} beside it" in text
    header = next(line for line in text.splitlines() if line.startswith("file "))
    names = header.split()
    assert names.index(TAIL) - names.index(HEADLINE) == 2  # p50, its ±, then the p90


def test_report_tables_and_chart_lead_with_it(tmp_path, conversion, profile_json):
    made = write_report([conversion, profile_json], tmp_path / "report")
    by_key = {t.key: t for t in tables(made.data)}
    answer, latency = by_key["answer"].columns, by_key["profile"].columns
    assert answer.index(f"{TAIL} ms") == answer.index(f"{HEADLINE} ms") + 1
    assert latency.index(f"{TAIL} ms") == latency.index(f"{HEADLINE} ±") + 1 == latency.index(f"{HEADLINE} ms") + 2
    assert f"p50 {min(r['p50_ms'] for r in made.data['profile_rows'] if r['seq_len'] == 16):.3g} ms" in \
        made.data["accelerators"]["take"]["cpu"]["why"]
    from albert_edge.report.charts import _latency

    from .test_answer_first import _plt

    plt = _plt()
    fig = _latency(made.data, plt)
    assert fig.axes[0].get_ylabel() == f"{HEADLINE} latency (ms)"
    plt.close(fig)
