"""`albert-edge profile` of an adaptive file (a classifier that stops early): on real sentences the
record carries how many passes each ran; on token ids of one fixed length it is refused in one
line, since that figure would not be the file's speed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.exits import ExitRule
from albert_edge.profile.inputs import text_feeds

from .conftest import CONFIG, FAST

SENTENCES = 24


@pytest.fixture(scope="module")
def adaptive_file(tmp_path_factory, spiece_model):
    import onnx

    from albert_edge.converters.onnx import _linears_as_matmul
    from albert_edge.converters.onnx_adaptive import adaptive_proto
    from albert_edge.converters.task_heads import AdaptiveClassifier
    from albert_edge.model import build_model

    # as many positions as the builtin sentences need: the file has no manifest to say its maximum
    config = CONFIG.replace(num_labels=3, max_position_embeddings=512, exits=json.dumps({"training": "joint"}))
    torch.manual_seed(0)
    model = build_model(config, "classification")
    with torch.no_grad():  # answers that settle at different passes
        model.classifier.weight.mul_(20)
        for head in model.exit_classifiers:
            head.weight.copy_(model.classifier.weight + 10 * torch.randn_like(head.weight))
    # stop at the first pass when it is more confident than the median sentence is there
    feeds, _ = text_feeds("builtin", spiece_model, SENTENCES, None)
    with torch.no_grad():
        first = [torch.softmax(model.pass_logits(**{k: torch.from_numpy(v).long() for k, v in f.items()})[0, 0], -1)
                 for f in feeds]
    rule = ExitRule("confidence", float(np.median([float(p.max()) for p in first])))
    path = tmp_path_factory.mktemp("adaptive") / "model.adaptive.onnx"
    onnx.save(adaptive_proto(AdaptiveClassifier(model, rule), 20, _linears_as_matmul), str(path))
    return path


def test_real_sentences_give_the_passes_each_ran(adaptive_file, spiece_model):
    result = CliRunner().invoke(main, ["profile", str(adaptive_file), "--text", "builtin", "--tokenizer",
                                       str(spiece_model), "--max-sentences", str(SENTENCES), *FAST, "--json"])
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)
    passes = record["text"]["passes"]
    counts = {int(k): v for k, v in passes["counts"].items()}
    assert sum(counts.values()) == passes["sentences"] == record["text"]["sentences"]
    assert set(counts) <= {1, 2, 3, 4} and len(counts) >= 2, counts
    mean = sum(k * v for k, v in counts.items()) / passes["sentences"]
    assert passes["mean"] == pytest.approx(mean) and passes["p50"] <= passes["p90"]


def test_one_fixed_length_is_refused_in_one_line(adaptive_file):
    result = CliRunner().invoke(main, ["profile", str(adaptive_file), "--seq-len", "16", *FAST])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line]
    assert len(lines) == 1 and "an adaptive file runs as many passes as each text needs" in lines[0]
    assert "--text builtin" in lines[0]


def test_another_setting_is_profiled_as_an_app_sets_it(adaptive_file, spiece_model):
    """--exit-setting runs the file at another setting of its rule (fed at run time, not a new file):
    a confidence near 1 runs more passes than the file's own, and the record names the setting."""
    def passes(*extra):
        result = CliRunner().invoke(main, ["profile", str(adaptive_file), "--text", "builtin", "--tokenizer",
                                           str(spiece_model), "--max-sentences", str(SENTENCES), "--no-fixed",
                                           *FAST, *extra, "--json"])
        assert result.exit_code == 0, result.output
        (record,) = json.loads(result.stdout)
        return record["text"]

    own, strict = passes(), passes("--exit-setting", "0.9999")
    assert strict["exit_setting"] == pytest.approx(0.9999) and "exit_setting" not in own
    assert strict["passes"]["mean"] > own["passes"]["mean"]


@pytest.mark.parametrize("which, value, message", [
    ("adaptive", "1.5", "--exit-setting: model.adaptive.onnx: exit setting 1.5 is outside the range"),
    ("plain", "0.9", "--exit-setting is for adaptive files"),
])
def test_a_setting_the_file_cannot_take_is_refused_in_one_line(adaptive_file, onnx_file, spiece_model,
                                                              which, value, message):
    path = adaptive_file if which == "adaptive" else onnx_file
    result = CliRunner().invoke(main, ["profile", str(path), "--text", "builtin", "--tokenizer", str(spiece_model),
                                       "--no-fixed", "--exit-setting", value, *FAST])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line]
    assert len(lines) == 1 and message in lines[0], result.output
