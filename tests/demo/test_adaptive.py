"""The demo's adaptive classifier (a file that stops early, convert --adaptive): made by the bundle
recipe, served by default, each answer saying the passes it ran; bundles made before it still
serve. Real runtimes throughout (onnxruntime, the TFLite Interpreter)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from albert_edge.demo.engine import ADAPTIVE, ADAPTIVE_DIR, Bundle, Engine, Variant
from albert_edge.runtime import Session

TEXTS = ["Return the quotient of two decimal numbers.", "Parse the email message and return its headers.",
         "The event loop runs the tasks."]


@pytest.fixture(scope="module")
def engine(tiny_bundle):
    return Engine(Bundle(tiny_bundle), num_threads=1)


def test_the_bundle_carries_the_adaptive_classifier_and_its_measured_figures(tiny_bundle):
    info = json.loads((tiny_bundle / "bundle.json").read_text())
    manifest = json.loads((tiny_bundle / ADAPTIVE_DIR / "manifest.json").read_text())
    adaptive, depth = info["adaptive"], manifest["config"]["num_hidden_layers"]
    # The rule is the one exit training chose and recorded in the checkpoint the files were made from.
    assert adaptive["rule"] == manifest["config"]["albert_edge_exits"]["rule"]
    assert adaptive["max_passes"] == depth and adaptive["training"].startswith("frozen")
    held_out = adaptive["held_out"]
    assert held_out["examples"] == info["held_out_accuracy"]["examples"] > 0
    for variant in ADAPTIVE:
        figures = held_out[variant.key]
        counts = {int(n): c for n, c in figures["passes"].items()}
        assert sum(counts.values()) == held_out["examples"] and set(counts) <= set(range(1, depth + 1))
        assert figures["mean_passes"] == pytest.approx(sum(n * c for n, c in counts.items()) / held_out["examples"],
                                                       abs=1e-3)
        assert 0 <= figures["accuracy"] <= 1 and 0 <= figures["agreement_with_full_depth"] <= 1
    # Frozen exit training leaves the full-depth answers alone: the file at full depth is the classifier's.
    for name in ("model.onnx", "model.tflite"):
        assert (tiny_bundle / ADAPTIVE_DIR / name).is_file()


def test_the_adaptive_file_answers_by_default_with_the_passes_it_ran(engine, tiny_bundle):
    assert engine.variant.key == "onnx-adaptive"
    for key in ("onnx-adaptive", "tflite-adaptive"):
        engine.select(key)
        session = Session(tiny_bundle / ADAPTIVE_DIR / Variant.parse(key).file_name)
        for text in TEXTS:
            result = engine.classify(text)
            # The passes and the label are the file's own, run by hand in the same runtime.
            feeds = engine.bundle.tokenizer(text, max_length=None, padding="longest")
            out = session.run({k: v for k, v in feeds.items() if k in session.input_names})
            assert result["passes"] == int(out["passes"][0]) and result["max_passes"] == 2
            assert result["label"] == engine.bundle.labels[int(np.argmax(out["logits"][0]))]
        status = engine.status()["models"]
        assert status["classifier"]["file"] == f"{ADAPTIVE_DIR}/{Variant.parse(key).file_name}"
        # The MLM has no exits: the adaptive variant fills blanks with the full-depth fp32 file.
        assert status["mlm"]["file"] == f"mlm/{Variant.parse(key).file_name}"
        assert (status["classifier"]["scheme"], status["mlm"]["scheme"]) == ("adaptive", "fp32")
        assert engine.fill_mask("The event ___ runs tasks.")["masks"]
    engine.select("onnx-int8")
    assert "passes" not in engine.classify(TEXTS[0])  # a full-depth file runs every pass: nothing to say


def test_a_bundle_made_before_the_adaptive_classifier_still_serves(tiny_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy, ignore=shutil.ignore_patterns(ADAPTIVE_DIR))
    info = json.loads((copy / "bundle.json").read_text())
    info.pop("adaptive")
    (copy / "bundle.json").write_text(json.dumps(info))
    engine = Engine(Bundle(copy), num_threads=1)
    assert engine.variant.key == "onnx-int8" and not any(k.endswith("adaptive") for k in engine.available())
    assert "passes" not in engine.classify(TEXTS[0]) and engine.fill_mask("The event ___ runs tasks.")["masks"]


def test_the_cli_says_the_passes(tiny_bundle):
    from click.testing import CliRunner

    from albert_edge.cli import main

    result = CliRunner().invoke(main, ["demo", "classify", str(tiny_bundle), TEXTS[0], "--threads", "1"])
    assert result.exit_code == 0, result.output
    passes = json.loads(CliRunner().invoke(main, ["demo", "classify", str(tiny_bundle), TEXTS[0], "--threads", "1",
                                                  "--json"]).output)["passes"]
    assert f"{passes} of 2 passes, onnx-adaptive" in result.output
    full = CliRunner().invoke(main, ["demo", "classify", str(tiny_bundle), TEXTS[0], "--model", "onnx-fp32"])
    assert full.exit_code == 0 and "passes" not in full.output


def test_the_server_answers_with_the_adaptive_file_by_default(tiny_bundle):
    import urllib.request

    from .conftest import Server

    server = Server(tiny_bundle, "--threads", "1")
    try:
        assert server.status["model"] == "onnx-adaptive" and server.status["bundle"]["adaptive"]["max_passes"] == 2
        request = urllib.request.Request(server.url + "/api/classify", data=json.dumps({"text": TEXTS[1]}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            answer = json.loads(reply.read())
        assert answer["model"] == "onnx-adaptive" and answer["passes"] in (1, 2) and answer["max_passes"] == 2
    finally:
        server.stop()
