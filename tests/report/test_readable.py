"""A report a person can read: the latency chart leaves out what the records call unusable, every
"±" says what it is and matches the notes, accuracy carries its sample-based interval, each model
has one parameter count, and a figure that looks wrong (fp16 .tflite memory) says why beside it.
Real profile records of a tiny ONNX model, changed where a case needs it."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from albert_edge.report import write_report
from albert_edge.report.tables import tables


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list[dict]:
    from albert_edge.config import AlbertConfig
    from albert_edge.converters.onnx import export
    from albert_edge.profile import ProfileSettings, profile

    from ..converters.conftest import tiny_model

    path = tmp_path_factory.mktemp("readable") / "model.onnx"
    export(tiny_model(AlbertConfig.preset("tiny")), path, seq_len=16)
    found = profile([path], ProfileSettings(seq_lens=(8, 16, 32), threads=(1,), runs=3, min_seconds=0.0, warmup=1))
    return [r.to_dict() for r in found]


def _report(tmp_path: Path, records: list[dict], *sources: str, charts: bool = False) -> Path:
    profile_json = tmp_path / "profile.json"
    profile_json.write_text(json.dumps(records))
    out = tmp_path / "report"
    write_report([*(sources or ("tiny",)), *([profile_json] if records else [])], out, charts=charts)
    return out


def _as(record: dict, name: str, fmt: str, scheme: str, p50: float, quality: str = "good",
        peak: int | None = None) -> dict:
    """``record`` as if measured of another file: its name, format, scheme, p50 and quality."""
    r = copy.deepcopy(record)
    r.update(file_name=name, file=name, format=fmt, scheme=scheme, warnings=[])
    r["latency"].update(p50=p50, p90=p50 * 1.1, p50_ci=[p50 * 0.99, p50 * 1.01], quality=quality)
    if peak is not None:
        r["memory"]["peak_after_timed"] = peak
    return r


def _fp16_sweep(records: list[dict]) -> list[dict]:
    """The case of the issue: an fp32 file timed well and an fp16 one whose 32- and 128-token
    points are unusable (196 ms, then 156 ms: a line going down)."""
    base = records[0]
    out = []
    for seq, fp32_ms, fp16_ms, fp16_quality in ((32, 50.0, 196.0, "unusable"), (64, 80.0, 120.0, "noisy"),
                                                (128, 110.0, 156.0, "unusable")):
        fp32 = _as(base, "model.tflite", "tflite", "fp32", fp32_ms)
        fp16 = _as(base, "model.fp16.tflite", "tflite", "fp16", fp16_ms, fp16_quality)
        for r in (fp32, fp16):
            r["seq_len"] = seq
        out += [fp32, fp16]
    return out


def _drawn_values(fig) -> set[float]:
    """Every y value the chart puts on its axes (lines, error bars' ends, markers)."""
    values = set()
    for ax in fig.axes:
        for line in ax.lines:
            values.update(round(float(y), 6) for y in line.get_ydata())
        for collection in ax.collections:
            for offset in collection.get_offsets():
                values.add(round(float(offset[1]), 6))
    return values


def test_the_latency_chart_leaves_out_unusable_points(tmp_path, records):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from albert_edge.report import charts

    out = _report(tmp_path, _fp16_sweep(records))
    data = json.loads((out / "report.json").read_text())
    fig = charts._latency(data, plt)
    drawn = _drawn_values(fig)
    assert 196.0 not in drawn and 156.0 not in drawn  # the unusable fp16 points
    assert {50.0, 80.0, 110.0, 120.0} <= drawn  # the good fp32 points and the noisy (ringed) fp16 one
    caption = fig.axes[0].get_title(loc="left")
    assert "unusable" in caption and "left out" in caption
    plt.close(fig)


def test_the_report_says_the_chart_left_points_out(tmp_path, records):
    pytest.importorskip("matplotlib")
    out = _report(tmp_path, _fp16_sweep(records), charts=True)
    md = (out / "report.md").read_text()
    assert "2 unusable timings are left out of the latency chart" in md


def test_the_interval_is_explained_and_the_notes_use_its_convention(tmp_path, records):
    r = copy.deepcopy(records[0])
    p50 = r["latency"]["p50"]
    # 9.4 % of the p50 wide, lopsided: half-width 4.7 %, the larger side 6.4 %
    r["latency"].update(p50_ci=[p50 * 0.97, p50 * 1.064], p50_ci_width=0.094, quality="noisy")
    r["warnings"] = ["timing noisy: the p50's interval is 9.4% of it wide (target 2%; the time budget ran out)"]
    md = (_report(tmp_path, [r]) / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith(f"| {r['file_name']}"))
    assert "±4.7%" in row and "±6.4%" not in row
    assert "half the width of the p50's 95% confidence interval, as a % of the p50" in md
    assert "9.4% of it wide" not in md and "the p50's 95% interval is ±4.7% of it" in md


def test_profile_prints_the_same_convention(records, capsys):
    from albert_edge.cli._profile_print import print_measured

    r = copy.deepcopy(records[0])
    p50 = r["latency"]["p50"]
    r["latency"].update(p50_ci=[p50 * 0.97, p50 * 1.064], p50_ci_width=0.094, quality="noisy")
    r["warnings"] = ["timing noisy: the p50's interval is 9.4% of it wide (target 2%; the time budget ran out)"]
    print_measured([r], [], None)
    text = capsys.readouterr().out
    assert "±4.7%" in text and "±6.4%" not in text and "9.4% of it wide" not in text
    assert "half the width of the p50's 95% confidence interval" in text


def _wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def _file(accuracy: dict, name: str = "model.int8-dynamic.onnx") -> dict:
    return {"name": name, "format": "onnx", "scheme": "int8-dynamic", "bytes": 2**20, "stored_weight_bytes": 2**19,
            "unique_weight_bytes": 2**19, "duplicates": 0, "bytes_by_precision": {"int8": 2**19},
            "accuracy": accuracy, "accuracy_note": None, "random_weights": False}


def _files_table(tmp_path, *files: dict):
    data = json.loads((_report(tmp_path, []) / "report.json").read_text())
    data["files"] = list(files)
    return next(t for t in tables(data) if t.key == "files")


def test_an_agreement_carries_its_wilson_interval(tmp_path):
    agreement = {"headline": 197 / 198, "headline_of": "logits MLM top-1 agreement", "drop": 1 / 198, "text": "x",
                 "random_ids": False, "count": 198, "count_of": "masked tokens"}
    table = _files_table(tmp_path, _file(agreement))
    low, high = _wilson(197, 198)
    cell = table.rows[0][-1]
    assert f"95% CI {100 * low:.2f}-{100 * high:.2f}%" in cell, cell
    assert any("Wilson" in n for n in table.notes)


def test_a_mean_cosine_carries_its_interval(tmp_path):
    cosine = {"headline": 0.9991, "headline_of": "last_hidden_state mean cosine", "drop": 0.0009, "text": "x",
              "random_ids": False, "count": 512, "count_of": "tokens", "cosine_min": 0.98}
    table = _files_table(tmp_path, _file(cosine))
    cell = table.rows[0][-1]
    half = 1.959964 * math.sqrt((1 - 0.9991) * (0.9991 - 0.98) / 512)
    assert f"95% CI {100 * (0.9991 - half):.2f}-{100 * min(1.0, 0.9991 + half):.2f}%" in cell, cell
    assert any("cosine" in n and "least" in n for n in table.notes)


def test_one_parameter_count_per_model(tmp_path):
    out = _report(tmp_path, [], "albert-base-v2")
    data = json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    bert = data["params"]["bert_total"]
    preset = next(r for r in data["presets"] if r["name"] == "bert-base")
    assert preset["params"] == bert
    counts = {f"{bert / 1e6:.2f}M"}
    for other in (bert + 768 * 768 + 768,):  # BERT-base built in ALBERT's layout, E -> H kept
        assert f"{other / 1e6:.2f}M" not in md
    assert all(c in md for c in counts)
    assert "pooler" in md and "position" in md  # the footnote says what is counted


def test_fp16_tflite_memory_above_fp32_says_why(tmp_path, records):
    base = records[0]
    fp32 = _as(base, "model.tflite", "tflite", "fp32", 1.0, peak=105 * 2**20)
    fp16 = _as(base, "model.fp16.tflite", "tflite", "fp16", 1.2, peak=250 * 2**20)
    md = (_report(tmp_path, [fp32, fp16]) / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| model.fp16.tflite"))
    assert "250.00 MiB" in row and "†" in row
    note = next(line for line in md.splitlines() if line.startswith("- †"))
    assert "fp32" in note and "dequantiz" in note and "105.00 MiB" in note and "250.00 MiB" in note
    fp32_row = next(line for line in md.splitlines() if line.startswith("| model.tflite"))
    assert "†" not in fp32_row


def test_fp16_tflite_memory_below_fp32_needs_no_word(tmp_path, records):
    base = records[0]
    fp32 = _as(base, "model.tflite", "tflite", "fp32", 1.0, peak=105 * 2**20)
    fp16 = _as(base, "model.fp16.tflite", "tflite", "fp16", 1.2, peak=80 * 2**20)
    md = (_report(tmp_path, [fp32, fp16]) / "report.md").read_text()
    assert "†" not in md and "dequantiz" not in md


def test_a_mean_cosine_keeps_what_its_interval_needs():
    """The file row of a base model's file keeps the rows and the least cosine its headline was taken over."""
    from albert_edge.report.files import _sample

    accuracy = {"headline": 0.9991, "headline_of": "last_hidden_state mean cosine", "outputs": [
        {"name": "last_hidden_state", "kind": "tokens", "rows": 512, "cosine_mean": 0.9991, "cosine_min": 0.98,
         "agreement": None, "agreement_of": None, "agreement_count": 0}]}
    assert _sample(accuracy) == {"count": 512, "count_of": "tokens", "cosine_min": 0.98}
