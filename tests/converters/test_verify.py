"""verify() and convert(): a good file passes, a file that diverges from PyTorch or stores a weight
twice fails, and a failed or interrupted conversion leaves nothing that looks finished."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from albert_edge import checkpoints
from albert_edge.formats import manifest
from albert_edge.converters.export import convert
from albert_edge.converters.onnx import export
from albert_edge.converters.verify import (ATOL, RTOL, TOLERANCES, DuplicateWeightError, OutputMatchError, ShapeError,
                                           SignatureError, VerificationError, WeightBoundError, default_lengths,
                                           verify)
from albert_edge.errors import CheckpointError, ConversionError, OutputError, user_message
from albert_edge.model import AlbertModel

from .conftest import TINY, tiny_model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = tiny_model(head="pretraining")
    return model, export(model, tmp_path_factory.mktemp("v") / "model.onnx", seq_len=16)


# -- verify ---------------------------------------------------------------------------------------

def test_good_file_passes_with_explicit_tolerances(exported):
    model, path = exported
    report = verify(model, path, seq_len=16, num_threads=1)
    assert report.ok, report.problems()
    assert report.format == "onnx" and report.backend == "onnxruntime"
    assert report.seq_lens == list(default_lengths(16, TINY.max_position_embeddings)) == [1, 5, 16, 64]
    assert {c.output for c in report.cases} == {"prediction_logits", "sop_logits"}
    assert all(c.atol == ATOL == 1e-4 for c in report.cases)
    assert max(report.max_abs_diff.values()) < 1e-5
    assert not report.tokenized and {c.source for c in report.cases} == {"random"}
    data = report.to_dict()
    assert data["ok"] and data["weights"]["duplicates"] == [] and json.dumps(data)


def test_hidden_states_get_no_relative_slack(tmp_path):
    model = tiny_model(head="base")
    report = verify(model, export(model, tmp_path / "m.onnx", seq_len=8), seq_len=8, seq_lens=(3,))
    assert {c.output: c.rtol for c in report.cases} == {"last_hidden_state": 0.0, "pooler_output": 0.0}


def test_other_weights_fail(exported):
    model, path = exported
    other = tiny_model(head="pretraining", seed=1)
    report = verify(other, path, seq_len=16)
    assert not report.ok
    assert "prediction_logits differs from PyTorch" in report.problems()[0]
    error = report.error("model.onnx failed verification")
    assert type(error) is OutputMatchError and isinstance(error, ConversionError)
    assert str(error).startswith(f"model.onnx failed verification: {report.problems()[0]} (and ")
    worst = next(c for c in report.cases if not c.ok)
    assert (error.output, error.max_abs_diff, error.atol, error.rtol) == (worst.output, worst.max_abs_diff, ATOL, RTOL)
    assert error.max_abs_diff > ATOL


def test_a_small_weight_change_fails(exported, tmp_path):
    model, path = exported
    proto = onnx.load(str(path))
    target = max(proto.graph.initializer, key=lambda t: np.prod(t.dims))
    values = numpy_helper.to_array(target).copy()
    values.flat[0] += 2e-3
    target.CopyFrom(numpy_helper.from_array(values, target.name))
    onnx.save(proto, str(tmp_path / "changed.onnx"))
    report = verify(model, tmp_path / "changed.onnx", seq_len=16, seq_lens=(4,))
    assert not report.ok and report.weights.ok


def test_a_stored_copy_fails_even_when_outputs_agree(exported, tmp_path):
    model, path = exported
    proto = onnx.load(str(path))
    biggest = max(proto.graph.initializer, key=lambda t: np.prod(t.dims))
    copy = numpy_helper.from_array(numpy_helper.to_array(biggest).T.copy(), "extra_copy")
    proto.graph.initializer.append(copy)
    onnx.save(proto, str(tmp_path / "copied.onnx"))
    report = verify(model, tmp_path / "copied.onnx", seq_len=16, seq_lens=(4,))
    assert all(c.ok for c in report.cases)
    assert not report.ok
    assert [d.kind for d in report.weights.duplicates] == ["transposed"]
    assert "extra_copy is a transposed copy of" in report.problems()[0]
    error = report.error("copied.onnx failed verification", more=False)
    assert type(error) is DuplicateWeightError and error.name == "extra_copy" and error.original
    assert str(error) == f"copied.onnx failed verification: {report.problems()[0]}"
    assert not isinstance(error, WeightBoundError)


def test_wrong_outputs_are_reported(exported):
    _, path = exported
    report = verify(tiny_model(head="base"), path, seq_len=16)
    assert not report.ok and report.cases == []
    assert report.io_problems == ["outputs are prediction_logits, sop_logits; expected last_hidden_state, pooler_output"]
    error = report.error("model.onnx failed verification")
    assert type(error) is SignatureError
    assert str(error).startswith("model.onnx failed verification: outputs are prediction_logits, sop_logits;")


def test_an_output_of_another_shape_is_a_shape_error(exported):
    model, path = exported

    class Session:  # the file's session, its prediction logits one position short
        input_names, output_names, format, backend_name = ["input_ids", "attention_mask", "token_type_ids"], \
            list(model.output_names), "onnx", "onnxruntime"

        def __init__(self):
            from albert_edge.runtime import Session as Real

            self.real = Real(path)

        def run(self, feeds):
            got = self.real.run(feeds)
            return {**got, "prediction_logits": got["prediction_logits"][:, 1:]}

    report = verify(model, path, seq_len=16, seq_lens=(4,), session=Session())
    error = report.error("model.onnx failed verification")
    assert type(error) is ShapeError and error.output == "prediction_logits"
    assert error.shape == [2, 3, TINY.vocab_size] and error.expected == [2, 4, TINY.vocab_size]
    assert f"(shape [2, 3, {TINY.vocab_size}], PyTorch [2, 4, {TINY.vocab_size}])" in str(error)


def test_every_target_has_its_tolerances():
    from albert_edge.converters import mediapipe_check, onnx_text, ort, transformers_js
    from albert_edge.converters.targets import TARGETS

    assert set(TOLERANCES) == set(TARGETS)
    assert (ATOL, RTOL) == (1e-4, 1e-4) and all((t.atol, t.rtol) == (ATOL, RTOL) for t in TOLERANCES.values())
    assert ort.TWIN_ATOL == onnx_text.TWIN_ATOL == 1e-5
    assert (mediapipe_check.ATOL, mediapipe_check.MIN_COSINE) == (1e-4, 0.9999)
    assert transformers_js.MIN_COSINE == 0.98 and TOLERANCES["executorch"].min_cosine == 0.999


def test_a_verification_error_is_one_line_the_cli_shows():
    for kind in (VerificationError, SignatureError, ShapeError, OutputMatchError, DuplicateWeightError,
                 WeightBoundError):
        assert issubclass(kind, ConversionError)
        assert user_message(kind("model.onnx failed verification: x\ny")) == "model.onnx failed verification: x y"


def test_tokenized_sentences(tmp_path, spiece_model):
    model = tiny_model(TINY.replace(vocab_size=400), head="mlm")
    path = export(model, tmp_path / "m.onnx", seq_len=16)
    report = verify(model, path, seq_len=16, tokenizer=spiece_model)
    assert report.ok, report.problems()
    text = [c for c in report.cases if c.source == "text"]
    assert report.tokenized and len(text) == 2
    assert 16 in {c.seq_len for c in text}  # pairs padded to the built length


def test_tokenizer_larger_than_the_vocabulary_is_refused(exported, spiece_model):
    from albert_edge.errors import TokenizerError

    model, path = exported
    with pytest.raises(TokenizerError, match="do not match"):
        verify(model, path, seq_len=16, tokenizer=spiece_model)


# -- convert ---------------------------------------------------------------------------------------

class Diverging(AlbertModel):
    """A model whose forward takes a Python branch on the length: the exporter traces one side
    only, so the file disagrees with PyTorch at other lengths."""

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        hidden, pooled = super().forward(input_ids, attention_mask, token_type_ids)
        return (hidden * 2, pooled) if input_ids.shape[1] > 10 else (hidden, pooled)


def test_convert_writes_verified_files_and_manifest(tmp_path):
    model = tiny_model(head="qa")
    result = convert(model, tmp_path / "out", seq_len=16)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.onnx"]
    assert result.head == "qa" and result.files[0].path == out / "model.onnx"
    m = manifest.read(out)
    entry = m.file("model.onnx")
    assert entry.sha256 == manifest.sha256_of(out / "model.onnx") and entry.size == (out / "model.onnx").stat().st_size
    assert entry.format == "onnx" and entry.format_version == {"opset": 20}
    assert [i["name"] for i in entry.inputs] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o["name"] for o in entry.outputs] == ["start_logits", "end_logits"]
    assert entry.parity["ok"] and entry.parity["max_abs_diff"]["start_logits"] < 1e-4
    assert entry.weights["duplicates"] == [] and entry.weights["stored_bytes"] <= entry.weights["bound_bytes"]
    assert m.config["hidden_size"] == 16 and m.source["head"] == "qa" and m.seq_len == 16
    assert oct((out / "model.onnx").stat().st_mode & 0o777) == "0o644"


def test_convert_from_a_checkpoint_uses_its_head_and_tokenizer(tmp_path, spiece_model):
    ckpt = tmp_path / "ckpt"
    checkpoints.save(tiny_model(TINY.replace(vocab_size=400), head="classification"), ckpt)
    (ckpt / "spiece.model").write_bytes(spiece_model.read_bytes())
    result = convert(ckpt, tmp_path / "out", seq_len=16)
    assert result.head == "classification"
    assert result.files[0].report.tokenized
    source = manifest.read(tmp_path / "out").source
    assert source["checkpoint"] == str(ckpt.resolve()) and source["format"] == "hf"
    with pytest.raises(CheckpointError, match="no weights for head 'qa'"):
        convert(ckpt, tmp_path / "out2", head="qa", seq_len=16)
    assert not (tmp_path / "out2").exists()


def test_convert_refuses_a_file_that_diverges(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(OutputMatchError, match="model.onnx failed verification: last_hidden_state differs") as caught:
        convert(Diverging(TINY).eval(), out, seq_len=16)
    assert caught.value.output == "last_hidden_state" and caught.value.atol == ATOL and caught.value.rtol == 0.0
    assert not out.exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(targets=("onnx", "coreml")), "unknown target 'coreml'; choose from onnx, tflite"),
        (dict(targets=()), "no target given"),
        (dict(head="ner"), "unknown head 'ner'"),
        (dict(head="mlm"), "the model given is a 'base' model, not 'mlm'"),
        (dict(seq_len=65), r"seq-len 65 is above the model's max_position_embeddings \(64\)"),
        (dict(seq_len=0), "seq-len .* must be a positive integer"),
        (dict(opset=12), "opset 12 is too old"),
    ],
)
def test_convert_bad_input_writes_nothing(tmp_path, kwargs, message):
    with pytest.raises(ConversionError, match=message):
        convert(tiny_model(), tmp_path / "out", **{"seq_len": 8, **kwargs})
    assert not (tmp_path / "out").exists()


def test_convert_refuses_a_directory_with_files_unless_forced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"already holds files \(notes.txt\); pass --force"):
        convert(tiny_model(), out, seq_len=8)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    convert(tiny_model(), out, seq_len=8, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.onnx", "notes.txt"]


def test_convert_refuses_an_output_that_cannot_be_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is a file, not a directory"):
        convert(tiny_model(), tmp_path / "file", seq_len=8)
    with pytest.raises(OutputError, match="file is a file, not a directory; choose another path"):
        convert(tiny_model(), tmp_path / "file" / "out", seq_len=8)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write anywhere")
def test_convert_refuses_a_read_only_directory(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    try:
        with pytest.raises(OutputError, match="is not writable"):
            convert(tiny_model(), out, seq_len=8)
    finally:
        out.chmod(0o700)


@pytest.mark.parametrize("when", ["export onnx", "verify onnx", "write manifest"])
def test_interrupted_conversion_leaves_nothing(tmp_path, when):
    def interrupt(what, done, total):
        if what == when:
            raise KeyboardInterrupt

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):  # passed on (the CLI exits 130), after the cleanup
        convert(tiny_model(), out, seq_len=8, on_step=interrupt)
    assert not out.exists()
    out.mkdir()  # an existing (empty) directory stays, and stays empty
    with pytest.raises(KeyboardInterrupt):
        convert(tiny_model(), out, seq_len=8, on_step=interrupt)
    assert list(out.iterdir()) == []


def test_forced_conversion_drops_the_old_manifest_first(tmp_path):
    out = tmp_path / "out"
    convert(tiny_model(), out, seq_len=8)
    old = manifest.read(out).files[0].sha256

    def interrupt(what, done, total):
        if what == "write manifest":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert(tiny_model(seed=3), out, seq_len=8, force=True, on_step=interrupt)
    assert manifest.read(out).files[0].sha256 == old  # interrupted before anything moved
    convert(tiny_model(seed=3), out, seq_len=8, force=True)
    assert manifest.read(out).files[0].sha256 != old


def test_manifest_read_errors(tmp_path):
    with pytest.raises(ConversionError, match="no such manifest"):
        manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text("{\"files\": [{\"name\": 1}]}")
    with pytest.raises(ConversionError, match="is not an albert-edge manifest"):
        manifest.read(tmp_path)
