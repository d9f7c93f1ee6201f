"""The ONNX Runtime .ort target: a file onnxruntime converted, run by a plain
onnxruntime.InferenceSession (the C++ of ONNX Runtime Mobile), that agrees with PyTorch, stores
each shared weight once as read back by the device side's reader, and comes with the operator
configurations of a reduced build; its int8 twin gives the int8 .onnx's outputs."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.converters import ort as ort_target
from albert_edge.converters.export import convert
from albert_edge.errors import ConversionError
from albert_edge.formats import ort_reader
from albert_edge.formats.weights import MIN_NUMEL, analyze, model_param_bytes, read_file

from .conftest import TINY, tiny_model

INNER_2 = TINY.replace(inner_group_num=2)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """model.ort and model.int8-dynamic.ort of the tiny base model (L=4, G=2), with their manifest."""
    model = tiny_model()
    out = tmp_path_factory.mktemp("ort") / "out"
    result = convert(model, out, targets=("ort",), seq_len=16, scheme="int8-dynamic")
    return model, out, result


@pytest.fixture(scope="module")
def int8_onnx(tmp_path_factory):
    """The tiny pretraining model (MLM decoder tied to the word embeddings) as fp32 .onnx and the
    int8-dynamic .onnx albert-edge quantize makes of it."""
    from albert_edge.quantize import QuantizeConfig, quantize

    model = tiny_model(head="pretraining")
    out = tmp_path_factory.mktemp("ort-int8") / "conv"
    convert(model, out, targets=("onnx",), seq_len=16)
    result = quantize(out / "model.onnx", QuantizeConfig("int8-dynamic"))
    return model, out / "model.onnx", result.out_path


def _feeds(T: int, seed: int, batch: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 99, size=(batch, T), dtype=np.int64)
    mask = np.ones((batch, T), dtype=np.int64)
    types = np.zeros((batch, T), dtype=np.int64)
    if T > 2:
        mask[-1, T - T // 3:] = 0
        types[:, T // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _plain(path) -> ort.InferenceSession:
    """onnxruntime with its defaults, as an app opens a file: nothing of albert_edge.runtime."""
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("T", [1, 7, 16, 64])
def test_fp32_ort_matches_pytorch_in_plain_onnxruntime(converted, T):
    model, out, _ = converted
    feeds = _feeds(T, seed=T)
    with torch.no_grad():
        want = [t.numpy() for t in model(*(torch.from_numpy(feeds[k]) for k in feeds))]
    session = _plain(out / "model.ort")
    assert [i.name for i in session.get_inputs()] == list(feeds)
    got = session.run(list(model.output_names), feeds)
    for w, g in zip(want, got):
        assert g.shape == w.shape
        assert float(np.abs(g - w).max()) <= 1e-4


def test_each_file_stores_each_weight_once(converted):
    model, out, result = converted
    params = model_param_bytes(model)
    for name in ("model.ort", "model.int8-dynamic.ort"):
        contents = ort_reader.read(out / name)
        report = analyze(contents, model)
        assert report.duplicates == [] and report.stored_bytes == report.unique_bytes, name
    fp32 = analyze(ort_reader.read(out / "model.ort"), model)
    assert params <= fp32.stored_bytes <= 1.01 * params
    int8 = analyze(ort_reader.read(out / "model.int8-dynamic.ort"))
    assert int8.stored_bytes < 0.6 * params  # int8 matrices and tables: the weights are not kept in float too


def test_manifest_records_parity_format_and_weights(converted):
    _, out, result = converted
    manifest = json.loads((out / "manifest.json").read_text())
    entries = {f["name"]: f for f in manifest["files"]}
    assert set(entries) == {"model.ort", "model.int8-dynamic.ort"}
    fp32, int8 = entries["model.ort"], entries["model.int8-dynamic.ort"]
    assert fp32["format"] == int8["format"] == "ort"
    assert fp32["format_version"]["optimization"] == ort_target.OPTIMIZATION
    assert fp32["format_version"]["onnxruntime_version"] == ort.__version__
    assert fp32["parity"]["ok"] and max(fp32["parity"]["max_abs_diff"].values()) <= 1e-4
    assert fp32["weights"]["duplicates"] == [] and int8["weights"]["duplicates"] == []
    assert int8["precision"] == "int8-dynamic" and int8["parity"]["parent"] == "model.ort"
    assert int8["parity"]["parent_sha256"] == fp32["sha256"]
    assert all(v <= ort_target.TWIN_ATOL for v in int8["parity"]["twin_max_abs_diff"].values())
    assert min(int8["parity"]["cosine_mean"].values()) > 0.99


def test_operator_configs_cover_every_file_and_name_no_paths(converted):
    _, out, _ = converted
    ops = set()
    for name in ("model.ort", "model.int8-dynamic.ort"):
        ops |= set(ort_reader.read(out / name).ops)
    plain = (out / "required_operators.config").read_text()
    typed = (out / "required_operators_and_types.config").read_text()
    listed = set()
    for line in plain.splitlines():
        if line and not line.startswith("#"):
            domain, opset, names = line.split(";")
            listed |= set(names.split(","))
    assert listed == ops
    assert "# - model.ort" in plain and "# - model.int8-dynamic.ort" in plain
    assert str(out) not in plain and str(out) not in typed  # no temporary directory named
    assert '{"inputs"' in typed  # operator types, for a build with reduced type support


def test_int8_ort_gives_the_int8_onnx_outputs(int8_onnx, tmp_path):
    """The .ort in plain onnxruntime, as an app runs it, against the int8 .onnx as albert-edge
    runs it (SkipLayerNormalization unfused in both)."""
    from albert_edge.runtime import Session

    model, _, int8 = int8_onnx
    path = ort_target.to_ort(int8, tmp_path / "model.int8-dynamic.ort")
    a, b = Session(int8), _plain(path)
    for T in (1, 9, 32, 64):
        feeds = _feeds(T, seed=T)
        want = a.run(feeds)
        for name, got in zip(model.output_names, b.run(list(model.output_names), feeds)):
            assert float(np.abs(want[name] - got).max()) <= ort_target.TWIN_ATOL


def test_folding_would_store_the_tied_int8_table_twice(int8_onnx, tmp_path):
    """The int8 word table is read by the embedding lookup and, through a Transpose, by the tied
    MLM decoder. Converted as it is, onnxruntime's constant folding stores a transposed copy;
    stored transposed and looked up by column, the table is stored once and nothing runs a
    Transpose of it."""
    _, _, int8 = int8_onnx
    folded = ort_target.to_ort(int8, tmp_path / "folded.ort", keep_shared=False)
    kept = ort_target.to_ort(int8, tmp_path / "kept.ort")
    copies = analyze(ort_reader.read(folded)).duplicates
    table = "albert.embeddings.word_embeddings.weight_int8"
    assert [(d.kind, {d.name, d.original}) for d in copies] == [("transposed", {table, table + "_T"})]
    report = analyze(ort_reader.read(kept))
    assert report.duplicates == []
    assert report.stored_bytes <= analyze(read_file(int8)).stored_bytes * 1.01 + 1024
    session = _plain(kept)
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    assert session.get_overridable_initializers() == []  # no weight was kept unfolded: none needed it
    assert [w.shape for w in ort_reader.read(kept).weights if w.name == table + "_T"] == [(8, 99)]


def test_a_weight_no_rewrite_fits_is_kept_unfolded(tmp_path):
    """A weight read by a Transpose and by another product (not a lookup) is declared an
    overridable initializer: folded, it would be stored twice."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.arange(64, dtype=np.float32).reshape(8, 8) / 7
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["a"]),
         helper.make_node("MatMul", ["x", "w"], ["b"]), helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [numpy_helper.from_array(w, "w")])
    source = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(source))
    folded = analyze(ort_reader.read(ort_target.to_ort(source, tmp_path / "folded.ort", keep_shared=False)))
    kept_path = ort_target.to_ort(source, tmp_path / "kept.ort")
    assert [d.kind for d in folded.duplicates] == ["transposed"]
    assert analyze(ort_reader.read(kept_path)).duplicates == []
    x = np.ones((2, 8), dtype=np.float32)
    assert np.allclose(_plain(kept_path).run(None, {"x": x})[0], x @ w.T + x @ w)


@pytest.mark.parametrize("level", ort_target.LEVELS)
def test_every_optimization_level_keeps_fp32_weights_once(level, tmp_path):
    """The fp32 graph reads every weight as stored (Gemm with transB for the tied decoder), so no
    level of onnxruntime's optimizers copies one; inner_group_num 2 has two layers per group."""
    model = tiny_model(INNER_2, head="pretraining")
    path = ort_target.export(model, tmp_path / "model.ort", seq_len=8, optimization=level)
    contents = ort_reader.read(path)
    report = analyze(contents, model)
    assert report.duplicates == [] and report.ok
    # Unoptimized graphs keep their shape arithmetic: small constants (1.3 KB here), no weight.
    weights = sum(w.nbytes for w in contents.weights if w.data.size >= MIN_NUMEL)
    params = model_param_bytes(model)
    assert params <= report.stored_bytes and weights <= 1.01 * params


def test_a_refused_scheme_writes_nothing(tmp_path):
    with pytest.raises(ConversionError, match="unknown ort scheme 'int4'"):
        convert(tiny_model(), tmp_path / "out", targets=("ort",), scheme="int4")
    assert not (tmp_path / "out").exists()


def test_cli_convert_to_ort(tmp_path):
    from albert_edge import checkpoints
    from albert_edge.model import build_model

    torch.manual_seed(0)
    ckpt = checkpoints.save(build_model(AlbertConfig.preset("tiny"), "base"), tmp_path / "ckpt")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(ckpt), "--to", "ort", "--out", str(out), "--seq-len", "8"])
    assert result.exit_code == 0, result.output
    assert "model.ort" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.ort", "required_operators.config",
                                                      "required_operators_and_types.config"]
    shown = CliRunner().invoke(main, ["inspect", str(out / "model.ort"), "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["format"] == "ort" and data["duplicates"] == [] and data["ort"]["nodes"] > 0
    assert data["stored_bytes"] == data["unique_bytes"] and data["within_bound"] is True


def test_an_opset_reaches_the_int8_twin(tmp_path, monkeypatch):
    """--opset with --scheme: the int8 .ort is made from an .onnx of that opset too."""
    import onnx

    from albert_edge.converters import twin

    made = []
    real = twin.verified_onnx

    def watched(*args, **kwargs):
        path = real(*args, **kwargs)
        made.append(onnx.load(str(path), load_external_data=False).opset_import[0].version)
        return path

    monkeypatch.setattr(twin, "verified_onnx", watched)
    result = convert(tiny_model(), tmp_path / "out", targets=("ort",), seq_len=8, opset=18, scheme="int8-dynamic")
    assert [f.name for f in result.files] == ["model.ort", "model.int8-dynamic.ort"]
    assert made == [18]


def test_quantize_writes_the_ort_twin_beside_the_int8_onnx(tmp_path):
    """quantize --ort: model.int8-dynamic.ort beside model.int8-dynamic.onnx, in the manifest, each
    weight once as the device side reads it back, the reduced-build configs written; plain
    onnxruntime (as ONNX Runtime Mobile opens it) picks the .onnx's top-1."""
    from albert_edge.formats import manifest as manifest_io
    from albert_edge.quantize import QuantizeConfig, quantize

    model = tiny_model(head="pretraining")
    out = tmp_path / "conv"
    convert(model, out, targets=("onnx",), seq_len=16)
    result = quantize(out / "model.onnx", QuantizeConfig("int8-dynamic"), beside=ort_target.OrtTwin())
    twin = out / "model.int8-dynamic.ort"
    assert result.beside_path == twin and twin.is_file()
    entry = manifest_io.read(out).file(twin.name)
    assert entry.precision == "int8-dynamic" and entry.format == "ort"
    assert all(v <= ort_target.TWIN_ATOL for v in entry.parity["twin_max_abs_diff"].values())
    contents = ort_reader.read(twin)
    assert analyze(contents).duplicates == []
    assert (out / "required_operators.config").is_file()
    feeds = _feeds(12, seed=3)
    want = _plain(result.out_path).run(None, feeds)[0]
    got = _plain(twin).run(None, feeds)[0]
    assert (want.argmax(-1) == got.argmax(-1)).mean() >= 0.99
    assert not list(out.glob(".*"))  # nothing staged is left


def test_quantize_ort_is_refused_where_it_cannot_apply(tmp_path):
    model = tiny_model()
    out = tmp_path / "conv"
    convert(model, out, targets=("onnx",), seq_len=16)
    result = CliRunner().invoke(main, ["quantize", str(out / "model.onnx"), "--scheme", "fp16", "--ort",
                                       "--out", str(out / "model.fp16.onnx")])
    assert result.exit_code == 2 and "--ort makes the .ort twin of an int8-dynamic .onnx" in result.stderr, result.output
    (out / "model.int8-dynamic.ort").write_bytes(b"an earlier file")
    result = CliRunner().invoke(main, ["quantize", str(out / "model.onnx"), "--scheme", "int8-dynamic", "--ort",
                                       "--out", str(out / "model.int8-dynamic.onnx")])
    assert result.exit_code == 2 and "model.int8-dynamic.ort" in result.stderr, result.output
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.int8-dynamic.ort", "model.onnx"]
    assert (out / "model.int8-dynamic.ort").read_bytes() == b"an earlier file"


def test_quantize_ort_never_writes_over_an_input(tmp_path):
    """A calibration text named as the .ort twin would be is refused, even with force, and kept."""
    from albert_edge.errors import AlbertEdgeError
    from albert_edge.quantize import QuantizeConfig, quantize

    out = tmp_path / "conv"
    convert(tiny_model(), out, targets=("onnx",), seq_len=16)
    text = out / "model.int8-dynamic.ort"
    text.write_text("The wind is from the west. " * 20, encoding="utf-8")
    with pytest.raises(AlbertEdgeError, match="model.int8-dynamic.ort"):
        quantize(out / "model.onnx", QuantizeConfig("int8-dynamic", calibration=(str(text),)), force=True,
                 beside=ort_target.OrtTwin())
    assert text.read_text(encoding="utf-8").startswith("The wind")
    assert not (out / "model.int8-dynamic.onnx").exists()
