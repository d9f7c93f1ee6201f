"""`albert-edge report` of an adaptive conversion (convert --adaptive) profiled on real text: the
speed/accuracy curve over the exit rule's settings, from fine-tuning's held-out figures (copied into
the manifest) and the profile's measured passes and latency, drawn and tabled."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from albert_edge.cli import main

from ..exit_fixtures import checkpoint_with_curve

FAST = ["--threads", "1", "--runs", "5", "--min-seconds", "0", "--max-seconds", "0.5", "--warmup", "1"]
CURVE = [{"kind": "patience", "setting": 1, "mean_passes": 2.1, "agreement": 0.9, "accuracy": 0.55},
         {"kind": "patience", "setting": 2, "mean_passes": 3.2, "agreement": 0.97, "accuracy": 0.6},
         {"kind": "confidence", "setting": 0.6, "mean_passes": 2.6, "agreement": 0.99, "accuracy": 0.61}]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, spiece_model):
    """An adaptive ONNX conversion of a classifier whose fine-tuning recorded its curve, profiled on
    real text at its own setting and at another."""
    work = tmp_path_factory.mktemp("adaptive-report")
    path = checkpoint_with_curve(work / "ckpt", spiece_model, CURVE, max_positions=512)
    edge = work / "edge"
    result = CliRunner().invoke(main, ["convert", str(path), "--to", "onnx", "--adaptive", "--seq-len", "64",
                                       "--out", str(edge)])
    assert result.exit_code == 0, result.output
    records = []
    for extra in ([], ["--exit-setting", "0.999"]):
        result = CliRunner().invoke(main, ["profile", str(edge / "model.onnx"), "--text", "builtin", "--tokenizer",
                                           str(spiece_model), "--max-sentences", "12", "--no-fixed", *FAST,
                                           *extra, "--json"])
        assert result.exit_code == 0, result.output
        records += json.loads(result.stdout)
    (work / "profile.json").write_text(json.dumps(records))
    return edge, work / "profile.json"


def test_the_manifest_carries_the_rule_and_its_curve(profiled):
    edge, _ = profiled
    adaptive = json.loads((edge / "manifest.json").read_text())["source"]["adaptive"]
    assert adaptive["kind"] == "confidence" and adaptive["passes"] == 4 and adaptive["n"] == 200
    assert adaptive["curve"] == CURVE


def test_the_report_draws_the_curve(tmp_path, profiled):
    edge, profile = profiled
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["report", str(edge), str(profile), "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "report.json").read_text())
    section = data["adaptive"]
    assert [r["own"] for r in section["curve"]] == [False, False, True]
    assert len(section["measured"]) == 2 and section["time_model"]["onnx"] in ("line", "proportional")
    speedups = {(r["kind"], r["setting"]): r["speedup"]["onnx"] for r in section["curve"]}
    assert speedups[("patience", 1)] > speedups[("patience", 2)] > 1  # fewer passes, faster
    markdown = (out / "report.md").read_text()
    assert "## Adaptive depth: speed and accuracy over the exit rule's settings" in markdown
    assert "| confidence 0.6 * | 2.60 of 4 |" in markdown and "[54.1-" in markdown  # Wilson over 200
    assert "adaptive" in {c["name"] for c in data["charts"]}
    assert (out / "charts" / "adaptive.png").stat().st_size > 1000


def test_a_conversion_without_an_adaptive_file_has_no_such_section(tmp_path, profiled, spiece_model):
    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model
    from albert_edge.train.state import export_model

    config = AlbertConfig.preset("tiny").replace(vocab_size=400)
    path = export_model(build_model(config, "base"), tmp_path / "ckpt", spiece_model)
    assert CliRunner().invoke(main, ["convert", str(path), "--to", "onnx", "--seq-len", "16", "--out",
                                     str(tmp_path / "edge")]).exit_code == 0
    result = CliRunner().invoke(main, ["report", str(tmp_path / "edge"), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r" / "report.json").read_text())["adaptive"] is None
    assert "Adaptive depth" not in (tmp_path / "r" / "report.md").read_text()
