"""convert --to onnx/ort --static: [1, N] int32 inputs, a graph NNAPI and Core ML take whole
(onnxruntime's own mobile checker says so), each weight stored once, outputs as PyTorch's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.converters import onnx as onnx_export
from albert_edge.converters import ort as ort_target
from albert_edge.converters.export import convert
from albert_edge.converters.verify import verify
from albert_edge.errors import ConversionError
from albert_edge.formats.mobile_partitions import mobile_partitions
from albert_edge.model import HEADS
from albert_edge.runtime import Session

from .conftest import tiny_model

N = 16
# What a static file must not hold: shape arithmetic, and the operators NNAPI does not list.
NOT_IN_A_STATIC_FILE = ("Shape", "Range", "Constant", "ConstantOfShape", "Expand", "LayerNormalization", "Gelu",
                        "Erf", "Concat")


def _static_ok(model, path):
    report = verify(model, path, seq_len=N)
    assert report.ok, report.problems()
    assert report.static_len == N
    assert report.weights.duplicates == []
    return report


@pytest.mark.parametrize("head", list(HEADS))
def test_every_head_is_static_and_agrees_with_pytorch(tmp_path, head):
    model = tiny_model(head=head)
    path = onnx_export.export(model, tmp_path / "model.onnx", seq_len=N, static=True)
    report = _static_ok(model, path)
    contents = report.contents
    assert [(s.name, s.dtype, s.shape) for s in contents.inputs] == [
        (name, "int32", (1, N)) for name in ("input_ids", "attention_mask", "token_type_ids")]
    assert all(isinstance(d, int) for s in contents.outputs for d in s.shape)
    assert not {op for op in NOT_IN_A_STATIC_FILE if contents.ops[op]}
    # the whole model is in the file, each weight once: the position table whole, read by a Slice
    assert report.weights.model_param_bytes <= report.weights.stored_bytes <= report.weights.bound_bytes
    assert contents.metadata["opset"] == onnx_export.STATIC_OPSET


@pytest.mark.parametrize("head", ["base", "pretraining", "classification"])
def test_nnapi_takes_the_whole_file_and_core_ml_all_but_the_lookups(tmp_path, head):
    """Today's figures for the tiny model, from onnxruntime's own checker: NNAPI one partition
    covering every node; Core ML (MLProgram) one partition, the word and token-type Gathers at the
    graph's start left out because its list has no Gather."""
    path = onnx_export.export(tiny_model(head=head), tmp_path / "model.onnx", seq_len=N, static=True)
    report = mobile_partitions(path)
    assert report.dynamic_inputs == [] and report.if_fixed == []
    nnapi = report.provider("NNAPI")
    assert (nnapi.partitions, nnapi.covered, nnapi.unsupported) == (1, nnapi.nodes, ())
    assert nnapi.suitability == "YES"
    core_ml = report.provider("CoreML MLProgram")
    assert core_ml.partitions == 1 and core_ml.covered == core_ml.nodes - 2
    assert [(u.op, u.nodes, u.reason) for u in core_ml.unsupported] == [
        ("ai.onnx:Gather", 2, "operator not in the provider's list")]


def test_the_dynamic_file_is_what_the_static_one_fixes(tmp_path):
    """The default file, measured the same way: dynamic shapes leave most nodes to the CPU."""
    path = onnx_export.export(tiny_model(), tmp_path / "model.onnx", seq_len=N)
    report = mobile_partitions(path)
    assert report.dynamic_inputs == ["input_ids", "attention_mask", "token_type_ids"]
    nnapi = report.provider("NNAPI")
    assert nnapi.partitions > 1 and nnapi.coverage < 0.5
    assert any(u.reason == "an input of dynamic shape" for u in nnapi.unsupported)
    fixed = next(p for p in report.if_fixed if p.provider == "NNAPI")
    assert {u.op for u in fixed.unsupported} >= {"ai.onnx:LayerNormalization", "ai.onnx:Gelu"}


def test_opset_20_gelu_is_written_out_too(tmp_path):
    model = tiny_model()
    path = onnx_export.export(model, tmp_path / "model.onnx", seq_len=N, static=True, opset=20)
    report = _static_ok(model, path)
    assert report.contents.ops["Gelu"] == 0 and report.contents.ops["ReduceMean"] > 0
    assert mobile_partitions(path).provider("NNAPI").partitions == 1


def test_a_short_text_runs_padded_to_n(tmp_path):
    """What an app does: pad to N, mask the padding; the real tokens' outputs are PyTorch's on the
    unpadded text."""
    model = tiny_model()
    path = onnx_export.export(model, tmp_path / "model.onnx", seq_len=N, static=True)
    rng = np.random.default_rng(0)
    T = 5
    ids = rng.integers(5, 99, size=(1, T))
    feeds = {"input_ids": np.pad(ids, ((0, 0), (0, N - T))), "attention_mask": np.pad(np.ones((1, T)), ((0, 0), (0, N - T))),
             "token_type_ids": np.zeros((1, N))}
    got = Session(path).run({k: v.astype(np.int32) for k, v in feeds.items()})
    with torch.no_grad():
        want = model(torch.from_numpy(ids), torch.ones(1, T, dtype=torch.long), torch.zeros(1, T, dtype=torch.long))
    assert np.abs(got["last_hidden_state"][:, :T] - want[0].numpy()).max() <= 1e-4
    assert np.abs(got["pooler_output"] - want[1].numpy()).max() <= 1e-4
    # Unpadded: one line naming the fix, before onnxruntime sees the feeds.
    with pytest.raises(ValueError, match=rf"this file takes {N} tokens \(\[1, {N}\] inputs\), not {T}: pad them"):
        Session(path).run({k: v[:, :T].astype(np.int32) for k, v in feeds.items()})


def test_convert_static_onnx_and_ort(tmp_path):
    model = tiny_model(head="mlm")
    result = convert(model, tmp_path / "out", targets=("onnx", "ort"), seq_len=N, static=True)
    assert [f.name for f in result.files] == ["model.onnx", "model.ort"]
    assert all(f.report.ok and f.entry.static_len == N for f in result.files)
    contents = ort_target.read_contents(tmp_path / "out" / "model.ort")
    assert [s.shape for s in contents.inputs] == [(1, N)] * 3
    # basic level: no fusion into operators the NPU providers do not list
    assert contents.metadata["format_version"]["optimization"] == ort_target.STATIC_OPTIMIZATION == "basic"
    assert not {op for op in (*NOT_IN_A_STATIC_FILE, "FastGelu", "FusedMatMul", "SkipLayerNormalization",
                              "Attention") if contents.ops[op]}


def test_static_ort_has_no_cpu_only_int8_twin(tmp_path):
    with pytest.raises(ConversionError, match="int8-static"):
        convert(tiny_model(), tmp_path / "out", targets=("ort",), seq_len=N, static=True, scheme="int8-dynamic")
    assert not (tmp_path / "out").exists()


def test_cli_convert_static(tmp_path):
    from albert_edge import checkpoints
    from albert_edge.model import build_model

    torch.manual_seed(0)
    ckpt = checkpoints.save(build_model(AlbertConfig.preset("tiny"), "base"), tmp_path / "ckpt")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(ckpt), "--to", "onnx", "--static", "--out", str(out),
                                       "--seq-len", "8"])
    assert result.exit_code == 0, result.output
    graph = onnx.load(str(out / "model.onnx")).graph
    assert [[d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.input] == [[1, 8]] * 3
