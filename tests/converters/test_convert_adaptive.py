"""`albert-edge convert --adaptive`: a classifier trained with early exits becomes TFLite, ONNX and
.ort files that stop where the exit rule says, each verified against PyTorch's adaptive forward
(answers and pass counts) before it is written; what cannot stop early is refused in one line
before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.exits import ExitRule, decide
from albert_edge.model import build_model
from albert_edge.train.state import export_model

RULE = {"kind": "patience", "setting": 1.0, "min_passes": 1}


def _classifier(exits: dict | None):
    config = AlbertConfig.preset("tiny").replace(vocab_size=400, num_labels=3, label_names=("a", "b", "c"),
                                                 exits=None if exits is None else json.dumps(exits))
    torch.manual_seed(0)
    model = build_model(config, "classification")
    if exits is not None:
        with torch.no_grad():  # answers that settle at different passes
            model.classifier.weight.mul_(20)
            for head in model.exit_classifiers:
                head.weight.copy_(model.classifier.weight + 10 * torch.randn_like(head.weight))
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, spiece_model):
    """A classifier whose fine-tuning trained exits and recorded its rule, as finetune --exits leaves it."""
    model = _classifier({"training": "frozen", "loss": "pabee", "rule": RULE})
    return model, export_model(model, tmp_path_factory.mktemp("exits") / "ckpt", spiece_model)


@pytest.fixture(scope="module")
def converted(tmp_path_factory, checkpoint):
    _, path = checkpoint
    out = tmp_path_factory.mktemp("adaptive") / "edge"
    result = CliRunner().invoke(main, ["convert", str(path), "--to", "tflite", "--to", "onnx", "--to", "ort",
                                       "--adaptive", "--seq-len", "16", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return out


def _inputs(spiece_model, n=30):
    """Real sentences, and token ids drawn at random (whose answers settle less alike)."""
    from albert_edge.text import read_sentences
    from albert_edge.tokenizer import AlbertTokenizer

    tok = AlbertTokenizer(spiece_model)
    sentences, _ = read_sentences(["builtin"])
    rng = np.random.default_rng(0)
    return ([np.array([tok.encode(s)[:60]]) for s in sentences[:n]]
            + [rng.integers(5, 400, (1, int(rng.integers(3, 60)))) for _ in range(n)])


def test_every_file_stops_where_pytorch_does(converted, checkpoint, spiece_model):
    from albert_edge.runtime import Session

    model, _ = checkpoint
    manifest = json.loads((converted / "manifest.json").read_text())
    assert sorted(f["name"] for f in manifest["files"]) == ["model.onnx", "model.ort", "model.tflite"]
    assert json.loads((converted / "labels.json").read_text()) == ["a", "b", "c"]
    seen = set()
    for name in ("model.tflite", "model.onnx", "model.ort"):
        session = Session(converted / name)
        assert sorted(session.output_names) == ["logits", "passes"]
        for ids in _inputs(spiece_model):
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
            out = session.run(feeds)
            with torch.no_grad():
                every = model.pass_logits(*(torch.from_numpy(a) for a in feeds.values())).numpy()
            answers, passes = decide(every, ExitRule.from_dict(RULE))
            np.testing.assert_array_equal(out["passes"], passes)
            np.testing.assert_allclose(out["logits"], answers, atol=1e-4)
            seen |= set(passes.tolist())
    assert len(seen) >= 2, seen


def test_a_rule_given_at_conversion_replaces_the_recorded_one(tmp_path, checkpoint):
    import onnx

    _, path = checkpoint
    result = CliRunner().invoke(main, ["convert", str(path), "--to", "onnx", "--adaptive", "--exit-rule",
                                       "patience=2", "--min-passes", "2", "--seq-len", "16", "--out", str(tmp_path / "o"),
                                       "--json"])
    assert result.exit_code == 0, result.output
    proto = onnx.load(str(tmp_path / "o" / "model.onnx"))
    setting = [t for t in proto.graph.initializer if t.name == "exit_setting"]
    assert len(setting) == 1 and onnx.numpy_helper.to_array(setting[0]) == 2.0
    assert "exit_setting" in [i.name for i in proto.graph.input]


@pytest.mark.parametrize("args, message", [
    (["--to", "tflite", "--adaptive", "--static"], "--adaptive cannot be --static"),
    (["--to", "onnx-text", "--adaptive"], "--adaptive cannot write --to onnx-text: the tokenizer-in graph"),
    (["--to", "executorch", "--adaptive"], "--adaptive cannot write --to executorch"),
    (["--to", "onnx", "--adaptive", "--exit-rule", "patience=9"], "patience (9) must be a whole number from 1 to 3"),
    (["--to", "onnx", "--adaptive", "--exit-rule", "confidence=1.5"], "confidence (1.5) must be above 0"),
    (["--to", "onnx", "--adaptive", "--exit-rule", "soon=1"], "--exit-rule 'soon=1': write KIND=SETTING"),
    (["--to", "onnx", "--adaptive", "--min-passes", "5"], "minimum passes (5) must be from 1 to 4"),
    (["--to", "onnx", "--exit-rule", "patience=1"], "--exit-rule goes with --adaptive"),
    (["--to", "onnx", "--adaptive", "--head", "base"], "--adaptive is for a classifier"),
])
def test_what_cannot_stop_early_is_refused_in_one_line(tmp_path, checkpoint, args, message):
    _, path = checkpoint
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(path), *args, "--seq-len", "16", "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output
    assert not out.exists()


def test_a_classifier_never_trained_with_exits_is_refused(tmp_path, spiece_model):
    path = export_model(_classifier(None), tmp_path / "plain", spiece_model)
    result = CliRunner().invoke(main, ["convert", str(path), "--to", "onnx", "--adaptive", "--seq-len", "16",
                                       "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert "trained without early exits" in result.output and "--exits frozen" in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name, scheme", [("model.onnx", "int8-dynamic"), ("model.onnx", "fp16"),
                                          ("model.tflite", "int8-dynamic")])
def test_quantized_adaptive_files_are_measured_on_answers_and_passes(tmp_path, converted, spiece_model, name, scheme):
    """int8 and fp16 forms keep the loop: their pass counts are compared with the fp32 file's beside the
    answers, and every weight the passes read is quantized (the loop's body included)."""
    import shutil

    from albert_edge.formats.float_weights import float_weights
    from albert_edge.runtime import Session

    edge = tmp_path / "edge"
    shutil.copytree(converted, edge)
    out = edge / name.replace("model.", f"model.{scheme}.")
    result = CliRunner().invoke(main, ["quantize", str(edge / name), "--scheme", scheme, "--out", str(out),
                                       "--samples", "8", "--eval-samples", "16", "--json"])
    assert result.exit_code == 0, result.output
    entry = next(f for f in json.loads((edge / "manifest.json").read_text())["files"] if f["name"] == out.name)
    outputs = {o["name"]: o for o in entry["parity"]["accuracy"]["outputs"]}
    assert outputs["passes"]["agreement_of"] == "same passes" and outputs["passes"]["rows"] > 0
    assert entry["parity"]["accuracy"]["headline_of"] == "logits label agreement"
    assert "passes" not in entry["parity"]["cosine_mean"]
    if name.endswith(".onnx"):  # (the TFLite converter leaves this tiny model's small weights float)
        assert not [w for w in float_weights(out) if w.dtype == "float32" and "embeddings" not in w.name]
    ids = np.array([[5, 17, 42, 8, 99, 3]])
    got = Session(out).run({"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})
    assert got["passes"].dtype == np.int32 and 1 <= int(got["passes"][0]) <= 4


def test_the_loop_body_weights_are_seen_by_the_float_weight_check(converted):
    from albert_edge.formats.float_weights import float_weights

    names = [w.name for w in float_weights(converted / "model.onnx")]
    assert any("albert_layers.0.attention.query" in n for n in names), names  # read inside the Loop


@pytest.mark.parametrize("name, scheme", [("model.onnx", "int8-static"), ("model.tflite", "int8-full")])
def test_integer_only_schemes_of_an_adaptive_file_are_refused(tmp_path, converted, name, scheme):
    out = tmp_path / f"q-{name}"
    result = CliRunner().invoke(main, ["quantize", str(converted / name), "--scheme", scheme, "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "is adaptive" in lines[0] and "int8-dynamic or fp16" in lines[0], result.output
    assert not out.exists()


def test_the_setting_changes_at_run_time_in_every_file(converted, checkpoint, spiece_model):
    """The TFLite file's set_exit_setting signature and the ONNX / .ort file's optional input take
    another setting without another file: the passes follow PyTorch's at that setting, and a value
    outside the rule's range is refused in one line, leaving the setting as it was."""
    from albert_edge.runtime import Session

    model, _ = checkpoint
    inputs = _inputs(spiece_model, n=12)
    for name in ("model.tflite", "model.onnx", "model.ort"):
        session = Session(converted / name)
        assert session.set_exit_setting(3) == 3.0
        for bad in (0, 9, 1.5):
            with pytest.raises(ValueError, match=f"{name}: exit setting {bad:g} is outside the range") as caught:
                session.set_exit_setting(bad)
            assert "\n" not in str(caught.value)
        for setting in (3, 1):
            session.set_exit_setting(setting)
            for ids in inputs:
                feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
                with torch.no_grad():
                    every = model.pass_logits(*(torch.from_numpy(a) for a in feeds.values())).numpy()
                _, passes = decide(every, ExitRule("patience", setting, 1))
                np.testing.assert_array_equal(session.run(feeds)["passes"], passes, err_msg=f"{name} at {setting}")


def test_a_file_that_is_not_adaptive_has_no_setting(tmp_path, checkpoint):
    from albert_edge.runtime import Session

    _, path = checkpoint
    result = CliRunner().invoke(main, ["convert", str(path), "--to", "onnx", "--seq-len", "16", "--out",
                                       str(tmp_path / "plain")])
    assert result.exit_code == 0, result.output
    with pytest.raises(ValueError, match="model.onnx: it is not adaptive"):
        Session(tmp_path / "plain" / "model.onnx").set_exit_setting(2)
