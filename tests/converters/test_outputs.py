"""convert(outputs=...) / `convert --outputs`: files that hold only the outputs asked for, and
only the weights those outputs read."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from albert_edge import checkpoints
from albert_edge.cli import main
from albert_edge.converters.export import convert, select_outputs
from albert_edge.errors import ConversionError
from albert_edge.runtime import Session

from .conftest import TINY, tiny_model

POOLER_BYTES = (TINY.hidden_size * TINY.hidden_size + TINY.hidden_size) * 4


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The tiny base model converted to ONNX and TFLite with all outputs and with last_hidden_state only."""
    model = tiny_model()
    root = tmp_path_factory.mktemp("outputs")
    full = convert(model, root / "full", targets=("onnx", "tflite"), seq_len=8)
    lean = convert(model, root / "lean", targets=("onnx", "tflite"), seq_len=8, outputs=["last_hidden_state"])
    return model, full, lean


@pytest.mark.parametrize("fmt", ["onnx", "tflite"])
def test_the_file_has_only_the_output_asked_for(both, fmt):
    model, full, lean = both
    entry = {f.format: f for f in lean.files}[fmt]
    assert entry.report.ok, entry.report.problems()
    assert [o["name"] for o in entry.entry.outputs] == ["last_hidden_state"]
    assert Session(entry.path).output_names == ["last_hidden_state"]
    # The model given keeps its pooler and both outputs.
    assert model.pooler is not None and model.output_names == ("last_hidden_state", "pooler_output")


@pytest.mark.parametrize("fmt", ["onnx", "tflite"])
def test_the_pooler_weights_go_with_its_output(both, fmt):
    _, full, lean = both
    before = {f.format: f.entry for f in full.files}[fmt]
    after = {f.format: f.entry for f in lean.files}[fmt]
    saved = before.weights["stored_bytes"] - after.weights["stored_bytes"]
    # The pooler's weight and bias, and (ONNX) the few bytes of the index constant that picks [CLS].
    assert POOLER_BYTES <= saved <= POOLER_BYTES + 64
    assert before.size - after.size >= POOLER_BYTES
    assert after.weights["duplicates"] == [] and after.weights["model_param_bytes"] == (
        before.weights["model_param_bytes"] - POOLER_BYTES)


def test_all_outputs_or_none_leave_the_model_as_it_is():
    model = tiny_model()
    assert select_outputs(model, None) is model
    assert select_outputs(model, ["pooler_output", "last_hidden_state"]) is model


@pytest.mark.parametrize("head, outputs, message", [
    ("base", ["logits"], "'base' head has outputs last_hidden_state, pooler_output"),
    ("base", [], r"--outputs \(none\)"),
    ("base", ["pooler_output"], "cannot leave out last_hidden_state; outputs it can leave out: pooler_output"),
    ("pretraining", ["prediction_logits"], "cannot leave out sop_logits; outputs it can leave out: none"),
])
def test_outputs_that_cannot_be_chosen_are_one_clear_error(tmp_path, head, outputs, message):
    with pytest.raises(ConversionError, match=message):
        convert(tiny_model(head=head), tmp_path / "out", seq_len=8, outputs=outputs)
    assert not (tmp_path / "out").exists()


def test_cli_outputs(tmp_path):
    ckpt = checkpoints.save(tiny_model(), tmp_path / "ckpt")
    runner = CliRunner()
    good = runner.invoke(main, ["convert", str(ckpt), "--out", str(tmp_path / "lean"), "--seq-len", "8",
                                "--outputs", "last_hidden_state", "--json"])
    assert good.exit_code == 0, good.output
    assert Session(tmp_path / "lean" / "model.onnx").output_names == ["last_hidden_state"]
    bad = runner.invoke(main, ["convert", str(ckpt), "--out", str(tmp_path / "bad"), "--outputs", "logits"])
    assert bad.exit_code == 2
    assert "has outputs last_hidden_state, pooler_output" in bad.output and "Traceback" not in bad.output
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("fmt", ["onnx", "tflite"])
def test_quantized_files_keep_the_chosen_outputs(tmp_path, fmt):
    """A TFLite scheme rebuilds the graph from the checkpoint: with the parent's outputs."""
    from albert_edge.converters.quantized import quantize_file
    from albert_edge.quantize import QuantizeConfig

    ckpt = checkpoints.save(tiny_model(), tmp_path / "ckpt")
    convert(ckpt, tmp_path / "lean", targets=(fmt,), seq_len=8, outputs=["last_hidden_state"])
    out = tmp_path / "lean" / f"model.int8.{fmt}"
    result = quantize_file(tmp_path / "lean" / f"model.{fmt}", QuantizeConfig("int8-dynamic", num_samples=4, eval_samples=4), out)
    assert result.check.ok
    assert Session(out).output_names == ["last_hidden_state"]
