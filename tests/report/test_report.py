"""`albert-edge report`: figures equal those of `params --json`, `inspect --json` and the profile
records they came from; bad input is one line, exit 2, nothing written; partial input is a report
that says what it lacks."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.files import STAGING_MARK

from .conftest import SEQ, copy_dir, make_checkpoint


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def report_json(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def cli_json(*args) -> dict:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("kind", ["preset", "config", "checkpoint"])
def test_params_equal_params_json(tmp_path, tiny_checkpoint, kind):
    source = {"preset": "albert-base-v2", "config": tiny_checkpoint / "config.json",
              "checkpoint": tiny_checkpoint}[kind]
    result = run("report", source, "--out", tmp_path / "r")
    assert result.exit_code == 0, result.output
    data = report_json(tmp_path / "r")
    assert data["params"] == cli_json("params", source)
    assert {"report.md", "report.html", "report.json", "charts"} <= {p.name for p in (tmp_path / "r").iterdir()}


def test_preset_report_shows_albert_base_costs_bert_base_compute(tmp_path):
    data = report_json(write(tmp_path, "albert-base-v2"))
    parts = data["param_parts"]
    assert sum(parts["albert"].values()) == data["params"]["total"]
    assert sum(parts["bert"].values()) == data["params"]["bert_total"]
    at128 = next(r for r in data["compute"] if r["seq_len"] == 128)
    assert abs(at128["macs_total"] / at128["bert_macs_total"] - 1) < 0.01
    bert = next(r for r in data["presets"] if r["name"] == "bert-base")
    assert abs(at128["macs_total"] / bert["macs_128"] - 1) < 0.01
    assert [r["name"] for r in data["presets"]][:4] == ["albert-base-v2", "albert-large-v2", "albert-xlarge-v2",
                                                       "albert-xxlarge-v2"]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "no profile results" in md and "no model files" in md


def write(tmp_path: Path, *sources) -> Path:
    from albert_edge.report import write_report

    return write_report([str(s) for s in sources], tmp_path / "r").out_dir


def test_compute_equals_the_runtimes_count_of_the_file(conversion):
    """The config formula and the MACs the runtime's own node list adds up to agree exactly."""
    from albert_edge.config import AlbertConfig
    from albert_edge.formats.manifest import read
    from albert_edge.profile.opcount import count
    from albert_edge.report import compute_rows

    config = AlbertConfig.from_hf_dict(read(conversion).config)
    for name in ("model.onnx", "model.tflite"):
        for seq in (8, SEQ):
            assert count(conversion / name, 1, seq).macs == compute_rows(config, (seq,))[0].macs_total


def test_conversion_files_equal_inspect_json(tmp_path, conversion):
    out = tmp_path / "r"
    assert run("report", conversion, "--out", out).exit_code == 0
    data = report_json(out)
    assert {f["name"] for f in data["files"]} == {"model.onnx", "model.tflite", "model.int8-dynamic.onnx"}
    for f in data["files"]:
        inspected = cli_json("inspect", conversion / f["name"])
        assert f["inspect"] == inspected
        assert f["stored_weight_bytes"] == inspected["stored_bytes"]
        assert f["bytes_by_precision"] == inspected["precision"]["weight_bytes_by_dtype"]
        assert f["bytes"] == (conversion / f["name"]).stat().st_size
        # what a browser or an app downloads from a server that gzips: the file's gzip size
        assert f["download_bytes"] == len(gzip.compress((conversion / f["name"]).read_bytes(), 6, mtime=0))
        assert 0 < f["download_bytes"] < f["bytes"]
    markdown = (out / "report.md").read_text()
    assert "download (gzip)" in markdown and "zlib level 6" in markdown
    int8 = next(f for f in data["files"] if f["scheme"] == "int8-dynamic")
    # random ids (no tokenizer): shown as such, kept off the accuracy chart, and the report says it lacks accuracy
    assert int8["accuracy"]["random_ids"] and "random token ids" in int8["accuracy_note"]
    assert any("no accuracy figures" in m for m in data["missing"])
    assert "accuracy_vs_size" not in {c["name"] for c in data["charts"]}


def test_accuracy_of_a_trained_model_is_the_manifests(tmp_path, trained_conversion):
    from albert_edge.formats.manifest import read

    data = report_json(write(tmp_path, trained_conversion))
    entry = read(trained_conversion).file("model.int8-dynamic.onnx")
    row = next(f for f in data["files"] if f["name"] == "model.int8-dynamic.onnx")
    assert row["accuracy"]["headline"] == entry.parity["accuracy"]["headline"]
    assert not row["accuracy"]["random_ids"] and row["accuracy_note"] is None
    assert "accuracy_vs_size" in {c["name"] for c in data["charts"]}
    assert not any("accuracy" in m for m in data["missing"])
    # the figure says what it was counted over
    output = next(o for o in entry.parity["accuracy"]["outputs"] if o["kind"] == "mlm")
    assert row["accuracy"]["count"] == output["agreement_count"] > 0 and row["accuracy"]["count_of"] == "masked tokens"
    shown = f"{100 * row['accuracy']['headline']:.2f}% of {output['agreement_count']:,} masked tokens"
    out = tmp_path / "r"
    assert shown in (out / "report.md").read_text() and shown in (out / "report.html").read_text()


def test_random_weights_never_show_accuracy(tmp_path, conversion):
    """A conversion of a checkpoint noted as random-init shows no agreement figure at all."""
    from albert_edge.formats.manifest import read, write as write_manifest

    ckpt = make_checkpoint(tmp_path / "random-ckpt", random_note=True)
    edge = copy_dir(conversion, tmp_path / "edge")
    manifest = read(edge)
    manifest.source["checkpoint"] = str(ckpt)
    write_manifest(manifest, edge)
    data = report_json(write(tmp_path, edge))
    assert data["model"]["weights"] == "random-init"
    int8 = next(f for f in data["files"] if f["scheme"] == "int8-dynamic")
    assert int8["accuracy"] is None and "random weights" in int8["accuracy_note"]
    assert any("the weights are random" in m for m in data["missing"])
    md = (tmp_path / "r" / "report.md").read_text()
    assert "Weights: random" in md and "% (" not in md.split("## Model files")[1].split("##")[0]


@pytest.mark.parametrize("jsonl", [False, True])
def test_profile_figures_are_the_records(tmp_path, conversion, profile_json, jsonl):
    records = json.loads(profile_json.read_text())
    source = profile_json
    if jsonl:
        source = tmp_path / "profile.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in records))
    data = report_json(write(tmp_path, conversion, source))
    assert data["profile"] == records
    for row, record in zip(data["profile_rows"], records):
        assert row["p50_ms"] == record["latency"]["p50"] and row["p90_ms"] == record["latency"]["p90"]
        assert row["peak_rss"] == record["memory"]["peak_after_timed"]
        assert row["estimated"] is False and row["file_name"] == record["file_name"]
    assert "latency" in {c["name"] for c in data["charts"]}
    assert not any("profile" in m for m in data["missing"])


def test_estimates_are_marked_and_never_measurements(tmp_path, conversion, profile_json):
    """Records of the profiler's own estimate for a Raspberry Pi 4, scaled by this machine's
    measurements (and one for a length not measured here, which carries no sha256)."""
    from albert_edge.profile.estimate import estimate

    measured = json.loads(profile_json.read_text())
    onnx = [r for r in measured if r["file_name"] == "model.onnx"]
    estimates = [r.to_dict() for r in estimate([conversion / "model.onnx"], "pi4", (8, SEQ, 12), 1, onnx)]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(onnx + estimates))
    data = report_json(write(tmp_path, conversion, path))
    rows = data["profile_rows"]
    assert [r["estimated"] for r in rows] == [False] * len(onnx) + [True] * len(estimates)
    for row, record in zip(rows[len(onnx):], estimates):
        assert row["device"] == record["estimate"]["device_title"] and row["p50_ms"] == record["estimate"]["ms"]
        assert row["p90_ms"] is None and row["peak_rss"] is None  # no measured field carries an estimate
    md = (tmp_path / "r" / "report.md").read_text()
    assert md.count("| ESTIMATE |") == len(estimates) and "never shown as measurements" in md


def test_profile_of_another_model_is_refused(tmp_path, conversion, profile_json):
    records = json.loads(profile_json.read_text())
    records[0]["sha256"] = "0" * 64  # a file of the same name, another model
    other = tmp_path / "other.json"
    other.write_text(json.dumps(records))
    result = CliRunner().invoke(main, ["report", str(conversion), str(other), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "another model" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists() and not [p for p in tmp_path.iterdir() if STAGING_MARK in p.name]


def test_two_models_are_refused(tmp_path, conversion):
    result = CliRunner().invoke(main, ["report", "albert-base-v2", str(conversion), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "describes another model" in result.output
    assert not (tmp_path / "r").exists()


def test_manifest_whose_files_are_gone(tmp_path, conversion):
    edge = copy_dir(conversion, tmp_path / "edge")
    (edge / "model.tflite").unlink()
    result = CliRunner().invoke(main, ["report", str(edge), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "model.tflite, which is missing" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_changed_file_is_refused(tmp_path, conversion):
    edge = copy_dir(conversion, tmp_path / "edge")
    with open(edge / "model.onnx", "ab") as fh:
        fh.write(b"\0")
    result = CliRunner().invoke(main, ["report", str(edge), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "changed since" in result.output


def test_unwritable_out(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = CliRunner().invoke(main, ["report", "tiny", "--out", str(blocker / "r")])
    assert result.exit_code == 2 and "is a file, not a directory" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_parent(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        result = CliRunner().invoke(main, ["report", "tiny", "--out", str(parent / "r")])
        assert result.exit_code == 2 and "not writable" in result.output
    finally:
        parent.chmod(0o755)


def test_failed_start_leaves_no_parents(tmp_path, monkeypatch):
    """The temporary directory cannot be made: the parents made for --out are removed again."""
    import tempfile

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", no_space)
    result = CliRunner().invoke(main, ["report", "tiny", "--no-charts", "--out", str(tmp_path / "new" / "deeper" / "r")])
    assert result.exit_code == 2 and "cannot create" in result.output
    assert sorted(tmp_path.iterdir()) == []


def test_existing_out_needs_force(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "mine.txt").write_text("a user's file")
    result = CliRunner().invoke(main, ["report", "tiny", "--out", str(out)])
    assert result.exit_code == 2 and "--force" in result.output
    assert (out / "mine.txt").read_text() == "a user's file"
    assert run("report", "tiny", "--out", out, "--force").exit_code == 0
    assert not (out / "mine.txt").exists() and (out / "report.json").is_file()


@pytest.mark.parametrize("exchange", [True, False], ids=["swap", "two-renames"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_interrupt_while_installing_keeps_the_old_report(tmp_path, monkeypatch, interrupt_install, exchange, after):
    """Ctrl-C on either side of the step that puts the new report in place: the old report
    stays, whole (albert_edge.files.install; tests/test_files.py interrupts every step)."""
    out = tmp_path / "r"
    assert run("report", "tiny", "--no-charts", "--out", out).exit_code == 0
    before = (out / "report.json").read_bytes()
    fired = interrupt_install(out, exchange, after)
    result = CliRunner().invoke(main, ["report", "tiny", "--no-charts", "--out", str(out), "--force"])
    monkeypatch.undo()
    assert fired and result.exit_code == 130, result.output
    assert (out / "report.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_partial_inputs_say_what_they_lack(tmp_path, conversion):
    """A lone model file (no manifest beside it): no config, so no parameters or compute."""
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "model.onnx").write_bytes((conversion / "model.onnx").read_bytes())
    data = report_json(write(tmp_path, lone / "model.onnx"))
    assert data["params"] is None and data["compute"] == []
    assert any("no model config" in m for m in data["missing"])
    assert any("no profile results" in m for m in data["missing"])
    assert data["files"][0]["scheme"] is None
    html = (tmp_path / "r" / "report.html").read_text()
    assert "Not in this report" in html and "no model config" in html


def test_unknown_source(tmp_path):
    result = CliRunner().invoke(main, ["report", "no-such-thing", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "not a preset" in result.output


def test_html_is_self_contained(tmp_path, conversion, profile_json):
    out = write(tmp_path, conversion, profile_json)
    html = (out / "report.html").read_text()
    assert "http://" not in html and "https://" not in html and "<script" not in html
    charts = report_json(out)["charts"]
    assert html.count('src="data:image/png;base64,') == len(charts) >= 4
    for chart in charts:
        assert (out / "charts" / chart["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / "charts" / chart["svg"]).read_text().lstrip().startswith("<?xml")


def test_without_matplotlib_and_torch(run_blocked, tmp_path, conversion, profile_json):
    """On a device: no torch, no tensorflow, no matplotlib: tables only, with one line saying why."""
    out = tmp_path / "r"
    proc = run_blocked(f"""
        import importlib.abc, sys
        class NoPlots(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "matplotlib":
                    raise ImportError("no matplotlib here")
        sys.meta_path.insert(0, NoPlots())
        from albert_edge.report import write_report
        result = write_report([{str(conversion)!r}, {str(profile_json)!r}], {str(out)!r})
        print("attempts", attempts)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "attempts []" in proc.stdout
    data = report_json(out)
    assert data["charts"] == [] and "matplotlib is not installed" in data["chart_note"]
    assert "<img" not in (out / "report.html").read_text()
    assert "matplotlib is not installed" in (out / "report.md").read_text()
    assert len(data["files"]) == 3 and data["profile_rows"]


def test_quantize_json_result(tmp_path, conversion):
    """`quantize --json` output as a source: its accuracy is the file's, as quantize printed it."""
    edge = copy_dir(conversion, tmp_path / "edge")
    result = run("quantize", edge / "model.tflite", "--scheme", "fp16", "--eval-samples", "8", "--threads", "1",
                 "--out", edge / "model.fp16.tflite", "--json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)  # progress lines go to stderr
    saved = tmp_path / "quantize.json"
    saved.write_text(result.stdout)
    data = report_json(write(tmp_path, edge, saved))
    row = next(f for f in data["files"] if f["name"] == "model.fp16.tflite")
    assert row["accuracy"]["headline"] == printed["headline"] and row["scheme"] == "fp16"
    assert row["parent"] == printed["parent"]
    lone = CliRunner().invoke(main, ["report", "tiny", str(saved), "--out", str(tmp_path / "r2")])
    assert lone.exit_code == 2 and "names no file given" in lone.output


def test_cli_in_a_real_process(tmp_path):
    import subprocess
    import sys

    ok = subprocess.run([sys.executable, "-m", "albert_edge", "report", "tiny", "--out", str(tmp_path / "r"),
                         "--seq-len", "16,32", "--no-charts", "--json"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert [r["seq_len"] for r in data["compute"]] == [16, 32] and data["charts"] == []
    assert data == report_json(tmp_path / "r")
    bad = subprocess.run([sys.executable, "-m", "albert_edge", "report", "tiny", "--out", str(tmp_path / "s"),
                          "--seq-len", "sixteen"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and not (tmp_path / "s").exists()


def test_the_report_says_which_albert_edge_made_it(tmp_path):
    import albert_edge

    out = write(tmp_path, "tiny")
    assert report_json(out)["albert_edge_version"] == albert_edge.__version__
    made_by = f"by albert-edge {albert_edge.__version__}."
    assert made_by in (out / "report.md").read_text() and made_by in (out / "report.html").read_text()


def test_a_records_warnings_reach_the_markdown_and_the_page(tmp_path, conversion, profile_json):
    """profile.json's warnings (noisy timing, throttling) stay beside the figures they are about."""
    records = [{**r, "warnings": []} for r in json.loads(profile_json.read_text())]
    records[1]["warnings"] = ["timing unstable: block medians differ by 37%"]
    noisy = tmp_path / "noisy.json"
    noisy.write_text(json.dumps(records))
    out = write(tmp_path, conversion, noisy)
    row = next(r for r in report_json(out)["profile_rows"] if r["warnings"])
    assert row["warnings"] == ["timing unstable: block medians differ by 37%"]
    note = f"[1] {records[1]['file_name']}, seq len {records[1]['seq_len']}: timing unstable: block medians differ by 37%"
    for page in ("report.md", "report.html"):
        text = (out / page).read_text()
        assert "measured [1]" in text and note in text, page
    assert sum("measured [" in line for line in (out / "report.md").read_text().splitlines()) == 1


def test_a_slow_fp16_onnx_file_on_x86_is_explained(tmp_path, conversion, profile_json):
    records = json.loads(profile_json.read_text())
    for r in records:
        r["scheme"] = "fp16" if r["format"] == "onnx" else r["scheme"]
    fp16 = tmp_path / "fp16.json"
    fp16.write_text(json.dumps(records))
    text = (write(tmp_path, conversion, fp16) / "report.md").read_text()
    explained = "fp16 .onnx files are slow on x86 CPUs" in text
    assert explained == (records[0]["device"]["machine"] in ("x86_64", "AMD64"))



def test_a_noisy_record_is_marked_with_its_interval(tmp_path, conversion, profile_json):
    """Each measured p50 has its interval beside it; a record the profiler judged noisy is marked
    in its cell (md: '≈', html: a highlighted span) and the legend says what that means."""
    records = [{**r, "warnings": [], "latency": {**r["latency"], "quality": "good", "p50_ci": [
        r["latency"]["p50"] * 0.99, r["latency"]["p50"] * 1.02]}} for r in json.loads(profile_json.read_text())]
    records[0]["latency"]["quality"] = "noisy"
    records[0]["warnings"] = ["machine busy: other work kept 1.00 of 2 cores busy while measuring"]
    noisy = tmp_path / "noisy.json"
    noisy.write_text(json.dumps(records))
    out = write(tmp_path, conversion, noisy)
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "±1.5%" in md and "| noisy |" in md and md.count("| good |") == len(records) - 1
    assert sum("≈" in line for line in md.splitlines() if line.startswith("|")) == 1
    assert 'class="noisy"' in page and "noisy = other work on the machine" in page
    assert "machine busy: other work kept 1.00 of 2 cores" in md


@pytest.mark.parametrize("missing", ["onnx,onnxruntime", "onnxruntime"])
def test_a_device_without_the_onnx_readers_reports_what_it_can_read(tmp_path, conversion, cli_without, missing):
    """A device install with [tflite] alone reports a conversion folder that also holds .onnx
    files: the .tflite file is in the report, each .onnx file is named as left out, with why."""
    out = tmp_path / "report"
    done = cli_without(missing, "report", conversion, "--out", out, "--no-charts")
    assert done.returncode == 0, done.stderr
    data = json.loads((out / "report.json").read_text())
    readable = {"model.tflite"} | ({"model.onnx", "model.int8-dynamic.onnx"} if missing == "onnxruntime" else set())
    assert {f["name"] for f in data["files"]} == readable
    left_out = [line for line in done.stdout.splitlines() if line.startswith("not in this report: model.")]
    if missing == "onnxruntime":
        assert not left_out, done.stdout
    else:
        assert len(left_out) == 2 and all("needs onnx" in line for line in left_out), done.stdout
