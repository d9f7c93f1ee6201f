"""A report leads with the answer: which file to ship for which device and its latency, in the
first table; every column is headed; the page has no Markdown left in it and links are links;
the charts say only what they draw and keep to the data's range. Real files and profile records
of the tiny model (tests/report/conftest.py)."""

from __future__ import annotations

import copy
import re

import pytest

from albert_edge.report import tables, write_report
from albert_edge.report.render import inline_html

OTHER = "../../other-model/report/report.html"


@pytest.fixture(scope="module")
def made(tmp_path_factory, conversion, profile_json):
    out = tmp_path_factory.mktemp("answer") / "report"
    extra = {"pipeline": "the built-in default", "static_in": OTHER}
    return write_report([conversion, profile_json], out, extra=extra)


def test_the_first_table_is_which_file_for_which_device_with_its_latency(made):
    first = tables(made.data)[0]
    assert first.key == "answer"
    assert first.columns[:4] == ("for", "file", "p50 ms", "p90 ms")
    rows = [r for r in made.data["profile_rows"] if not r["estimated"] and r.get("quality") != "unusable"]
    longest = max(r["seq_len"] for r in rows)
    fastest = min((r for r in rows if r["seq_len"] == longest), key=lambda r: r["p50_ms"])
    measured = first.rows[0]
    assert measured[0].startswith(fastest["device"]) and measured[1] == fastest["file_name"]
    assert float(measured[2]) == pytest.approx(fastest["p50_ms"], abs=0.006)
    assert f"{longest} tokens" in measured[4]
    assert {r[0] for r in first.rows[1:]} == {"GPU (LiteRT)", "NNAPI", "Core ML (MLProgram)"}


def test_the_answer_comes_before_the_other_figures_in_both_files(made):
    md = (made.out_dir / "report.md").read_text()
    page = made.html.read_text()
    for text, heading in ((md, "## "), (page, "<h2")):
        first = text.index(heading)
        assert text.index("What to ship", first) == first + len(heading) + (0 if heading == "## " else
                                                                              len(' id="answer">'))
        assert text.index("What to ship") < text.index("Latency and memory") < text.index("Parameters of")


def test_every_column_is_headed(made):
    for table in tables(made.data):
        assert all(c.strip() for c in table.columns), f"{table.key}: {table.columns}"
    page = made.html.read_text()
    assert not re.search(r"<th[^>]*></th>", page)
    lines = (made.out_dir / "report.md").read_text().splitlines()
    headers = [line for line, below in zip(lines, lines[1:]) if line.startswith("| ") and below.startswith("|--")]
    assert len(headers) == len(tables(made.data))
    assert not [line for line in headers if re.search(r"\|\s*\|", line)]


def test_the_page_has_no_markdown_and_the_other_report_is_a_link(made):
    page = made.html.read_text()
    prose = re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)  # code blocks keep their code
    assert "`" not in prose and "**" not in prose
    assert f'<a href="{OTHER}">its report</a>' in page
    assert "<code>albert-edge pipeline</code>" in page
    assert f"[its report]({OTHER})" in (made.out_dir / "report.md").read_text()


def test_inline_markdown_is_escaped_then_tagged():
    assert inline_html("run `a <b>` and **x** [see](r.html?a=1&b=2)") == (
        'run <code>a &lt;b&gt;</code> and <strong>x</strong> <a href="r.html?a=1&amp;b=2">see</a>')


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def test_the_latency_legend_says_dashed_only_where_estimates_are_drawn(made):
    from albert_edge.report.charts import _latency

    plt = _plt()
    assert all("dashed" not in c["title"] for c in made.data["charts"])
    fig = _latency(made.data, plt)
    caption = fig.axes[0].get_title(loc="left")
    plt.close(fig)
    assert "dashed" not in caption and "estimates" not in caption and caption.startswith("bars: 95% interval of the p50")
    with_estimate = copy.deepcopy(made.data)
    row = dict(with_estimate["profile_rows"][0], estimated=True, device="Raspberry Pi 4", p50_ci=None,
               ms_range=[1.0, 2.0], p50_ms=1.5)
    with_estimate["profile_rows"].append(row)
    fig = _latency(with_estimate, plt)
    caption = fig.axes[0].get_title(loc="left")
    plt.close(fig)
    assert "dashed: estimates" in caption and "(estimates: their range)" in caption


def test_the_accuracy_axis_ends_at_100_percent():
    """Agreement is at most 100%: the axis stops there (it ran to 101%)."""
    from albert_edge.report.charts import _accuracy

    accuracy = {"headline": 0.995, "headline_of": "logits MLM top-1 agreement", "count": 400, "random_ids": False}
    data = {"files": [{"format": "onnx", "scheme": "int8-dynamic", "bytes": 3 * 2**20, "accuracy": accuracy},
                      {"format": "onnx", "scheme": "fp32", "bytes": 9 * 2**20, "accuracy": None}]}
    plt = _plt()
    fig = _accuracy(data, plt)
    low, high = fig.axes[0].get_ylim()
    plt.close(fig)
    assert high == 100 and 0 <= low < 99
