"""benchmarks/adaptive.py end to end in its smallest configuration on the tiny model: trained with
frozen exits, converted at full depth and adaptive, each file timed in TFLite's Interpreter and
onnxruntime's InferenceSession; the result file holds what the guide's table renders, and the
table fits 100 columns."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXTS = 12


def _renderer():
    spec = importlib.util.spec_from_file_location("render_results", ROOT / "benchmarks" / "render_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smallest_run_writes_every_figure_the_guide_renders(tmp_path, spiece_model):
    out = tmp_path / "adaptive-tiny.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "adaptive.py"), "--model", "tiny",
                           "--tokenizer", str(spiece_model), "--work", str(tmp_path / "work"), "--out", str(out),
                           "--train-examples", "32", "--texts", str(TEXTS), "--rounds", "1", "--passes", "1",
                           "--confidence", "--patience", "1", "2", "--threads", "1"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["benchmark"] == "adaptive" and result["texts"]["count"] == TEXTS
    layers = result["shape"]["num_hidden_layers"]
    assert result["training"]["fine_tuning"]["steps"] >= 1 and result["training"]["exits"]["steps"] >= 1
    for runtime in ("tflite", "onnx"):
        full = result["full_depth"][runtime]
        assert full["file_bytes"] > 0 and full["ms_per_text"] > 0 and full["accuracy"]["count"] == TEXTS
    settings = {(r["kind"], r["setting"]) for r in result["rows"]}
    assert {("patience", 1.0), ("patience", 2.0)} <= settings
    default = result["default_rule"]
    assert (default["kind"], float(default["setting"])) in settings
    for kind, setting in settings:
        by = {r["runtime"]: r for r in result["rows"] if (r["kind"], r["setting"]) == (kind, setting)}
        assert set(by) == {"tflite", "onnx"}
        # both engines run the same rule on the same texts: the same passes (the .onnx is one file per
        # kind, fed each setting through exit_setting; a setting that never reached it shows here)
        assert by["tflite"]["mean_passes"] == by["onnx"]["mean_passes"]
        for r in by.values():
            assert 1 <= r["mean_passes"] <= layers
            assert r["speedup"] > 0 and r["speedup_spread"][0] <= r["speedup"] <= r["speedup_spread"][1]
            low, high = r["agreement"]["interval"]
            assert low <= r["agreement"]["rate"] <= high and r["agreement"]["count"] == TEXTS
            assert r["peak_rss_ratio"] > 0 and r["file_bytes"] > 0
            assert r["full_bytes"] == result["full_depth"][r["runtime"]]["file_bytes"]
    # patience 1 stops at the second pass at the earliest
    assert all(r["mean_passes"] >= 2 for r in result["rows"] if r["kind"] == "patience")
    assert set(result["targets"]) == {"default_agreement_at_least_0.99", "default_latency_at_most_0.6x",
                                      "faster_setting_2.5x_within_2_points", "size_at_most_full_plus_exit_heads",
                                      "peak_memory_at_most_1.05x"}
    renderer = _renderer()
    lines = [renderer._adaptive_caption(result), *renderer._adaptive_rows(result), renderer._adaptive_targets(result)]
    assert len(renderer._adaptive_rows(result)) == 2 + len(settings)
    assert all(len(line) <= 100 for line in renderer._adaptive_rows(result)), renderer._adaptive_rows(result)
    assert all(lines)


def test_the_tiny_model_needs_its_tokenizer(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "adaptive.py"), "--model", "tiny", "--work",
                           str(tmp_path / "work"), "--out", str(tmp_path / "r.json")], capture_output=True, text=True)
    assert done.returncode == 2 and "--tokenizer" in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "work").exists() and not (tmp_path / "r.json").exists()
