"""The pipeline and a classifier trained with early exits: its adaptive files in files-adaptive/
beside the full-depth ones, both timed on the same real text, and the report's curve with the
speed-up against the full depth as measured; the built-in default's topic classifier, cached."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from albert_edge.cli import main

from ..exit_fixtures import checkpoint_with_curve

FAST = ["--seq-len", "32", "--profile-seq-len", "16", "--runs", "2", "--min-seconds", "0", "--threads", "1",
        "--to", "onnx", "--to", "tflite", "--scheme", "int8-dynamic"]
CURVE = [{"kind": "confidence", "setting": 0.6, "mean_passes": 2.6, "agreement": 0.99, "accuracy": 0.61},
         {"kind": "patience", "setting": 1, "mean_passes": 2.1, "agreement": 0.9, "accuracy": 0.55}]


@pytest.fixture(scope="module")
def ran(tmp_path_factory, spiece_model):
    """The pipeline on a tiny classifier whose config records its exits (rule and curve)."""
    work = tmp_path_factory.mktemp("pipeline-adaptive")
    checkpoint = checkpoint_with_curve(work / "topics", spiece_model, CURVE)
    result = CliRunner().invoke(main, ["pipeline", str(checkpoint), "--out", str(work / "out"), *FAST, "--json"])
    assert result.exit_code == 0, result.output
    return work / "out" / "topics", json.loads(result.stdout)


def test_adaptive_files_are_made_beside_the_full_depth(ran):
    model, data = ran
    convert = next(s for s in data["steps"] if s["step"] == "convert")
    assert "2 adaptive in files-adaptive/" in convert["detail"]
    made = json.loads((model / "files-adaptive" / "manifest.json").read_text())
    assert made["source"]["adaptive"]["kind"] == "confidence"
    assert {f["name"] for f in made["files"]} == {"model.onnx", "model.tflite"}
    assert (model / "files" / "model.onnx").is_file() and (model / "files" / "model.tflite").is_file()


def test_both_depths_are_timed_on_the_same_real_text(ran):
    model, _ = ran
    records = [r for r in json.loads((model / "profile.json").read_text()) if r["input_mode"] == "real-text"]
    by_folder = {}
    for r in records:
        by_folder.setdefault(r["file"].split("/")[-2], []).append(r)
    assert sorted(r["format"] for r in by_folder["files"]) == ["onnx", "tflite"]
    assert sorted(r["format"] for r in by_folder["files-adaptive"]) == ["onnx", "tflite"]
    assert all(r["text"]["passes"]["mean"] >= 1 for r in by_folder["files-adaptive"])
    assert not any(r["text"].get("passes") for r in by_folder["files"])
    assert len({r["text"]["sentences"] for r in records}) == 1  # the same texts


def test_the_report_sets_the_adaptive_speed_beside_the_full_depth(ran):
    model, _ = ran
    section = json.loads((model / "report" / "report.json").read_text())["adaptive"]
    assert set(section["full_depth_ms"]) == {"onnx", "tflite"}
    assert all(m["full_depth_ms"] for m in section["measured"])
    own = next(r for r in section["curve"] if r["own"])
    assert set(own["speedup"]) == {"onnx", "tflite"} and all(x > 0 for x in own["speedup"].values())
    markdown = (model / "report" / "report.md").read_text()
    assert "at full depth (" in markdown and "speed-up tflite" in markdown


def test_the_default_classifier_is_cached_keyed_and_verified(tmp_path, monkeypatch):
    """Fine-tuned (with its exits) once per recipe from the small model, reused while its files
    verify, made again when one changed or the recipe did; its held-out texts travel with it."""
    from albert_edge.pipeline import classifier, default, small

    monkeypatch.setattr(small, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(classifier, "cache_dir", lambda: tmp_path / "cache")
    base = dataclasses.replace(small.PIPELINE_RECIPE, vocab_size=300, steps=2, batch_size=4, max_seq_length=32,
                               eval_examples=8, config={**small.PIPELINE_RECIPE.config, "hidden_size": 32,
                                                        "intermediate_size": 64, "embedding_size": 16})
    monkeypatch.setattr(default, "PIPELINE_RECIPE", base)
    recipe = classifier.ClassifierRecipe(epochs=1, exit_epochs=1, seq_len=32, batch_size=64)
    monkeypatch.setattr(default, "CLASSIFIER_RECIPE", recipe)
    trained = []
    real_train = classifier._train
    monkeypatch.setattr(classifier, "_train", lambda *a: (trained.append(1), real_train(*a))[1])
    made, figures = default.make_classifier(tmp_path / "a")
    config = json.loads((made / "config.json").read_text())
    assert config["albert_edge_exits"]["rule"]["kind"] in ("patience", "confidence", "entropy")
    assert len((made / default.HELD_OUT).read_text().splitlines()) == figures["examples"]["held_out"] > 50
    assert figures["exits"]["passes"] == 4
    default.make_classifier(tmp_path / "b")
    assert trained == [1]
    cached = next((tmp_path / "cache").glob(f"{default.CLASSIFIER_NAME}-*"))
    (cached / "checkpoint" / "model.safetensors").write_bytes(b"changed")
    default.make_classifier(tmp_path / "c")
    assert trained == [1, 1]
    monkeypatch.setattr(default, "CLASSIFIER_RECIPE", dataclasses.replace(recipe, seed=1))
    default.make_classifier(tmp_path / "d")
    assert len(trained) == 3 and len(list((tmp_path / "cache").glob(f"{default.CLASSIFIER_NAME}-*"))) == 2
