"""albert_edge.runtime: one small API over onnxruntime and the TFLite interpreter, with no torch
and no tensorflow in the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from albert_edge.config import AlbertConfig
from albert_edge.converters.onnx import export
from albert_edge.errors import RuntimeUnavailable
from albert_edge.model import build_model
from albert_edge.runtime import Session, format_of

TINY = AlbertConfig.preset("tiny")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def base_model():
    torch.manual_seed(0)
    return build_model(TINY, "base")


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory, base_model) -> Path:
    return export(base_model, tmp_path_factory.mktemp("rt") / "model.onnx", seq_len=16)


@pytest.fixture(scope="module")
def tflite_file(tmp_path_factory) -> Path:
    """A small real TFLite file (embedding lookup, mask, types) with a serving_default
    signature and dynamic [batch, sequence] int32 inputs, built by the TFLite converter in a
    separate process so this one never imports tensorflow."""
    out = tmp_path_factory.mktemp("tfl") / "toy.tflite"
    code = textwrap.dedent(f"""
        import numpy as np, tensorflow as tf

        class Toy(tf.Module):
            def __init__(self):
                self.table = tf.constant(np.arange(40, dtype=np.float32).reshape(10, 4))

            @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name=n) for n in {INPUTS!r}])
            def serve(self, input_ids, attention_mask, token_type_ids):
                mask = tf.expand_dims(tf.cast(attention_mask, tf.float32), -1)
                types = tf.expand_dims(tf.cast(token_type_ids, tf.float32), -1)
                x = tf.gather(self.table, input_ids) * mask + types
                return {{"last_hidden_state": x, "pooler_output": tf.reduce_sum(x, axis=1)}}

        toy = Toy()
        conv = tf.lite.TFLiteConverter.from_concrete_functions([toy.serve.get_concrete_function()], toy)
        open({str(out)!r}, "wb").write(conv.convert())
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def toy_reference(ids, mask, types):
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    x = table[ids] * mask[..., None] + types[..., None]
    return x, x.sum(axis=1)


def feeds(batch: int, T: int, dtype=np.int64, vocab: int = 10, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, T), dtype=dtype)
    mask[-1, T // 2:] = 0
    types = np.zeros((batch, T), dtype=dtype)
    types[:, T // 3:] = 1
    return {"input_ids": rng.integers(0, vocab, (batch, T)).astype(dtype), "attention_mask": mask,
            "token_type_ids": types}


# -- ONNX ---------------------------------------------------------------------------------------

def test_onnx_specs(onnx_file):
    session = Session(onnx_file)
    assert session.format == "onnx" and session.backend_name == "onnxruntime"
    assert session.input_names == list(INPUTS)
    assert all(s.dtype == "int64" and s.shape == ("batch", "sequence") for s in session.inputs)
    assert session.output_names == ["last_hidden_state", "pooler_output"]
    assert session.outputs[0].shape == ("batch", "sequence", TINY.hidden_size)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_onnx_runs_and_matches_pytorch(onnx_file, base_model, dtype):
    session = Session(onnx_file, num_threads=1)
    f = feeds(2, 9, dtype=dtype, vocab=TINY.vocab_size)
    out = session.run(f)
    with torch.no_grad():
        hidden, pooled = base_model(*(torch.from_numpy(f[n].astype(np.int64)) for n in INPUTS))
    assert out["last_hidden_state"].shape == (2, 9, TINY.hidden_size)
    np.testing.assert_allclose(out["last_hidden_state"], hidden.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(out["pooler_output"], pooled.numpy(), atol=1e-5, rtol=0)


def test_onnx_feeds_must_match_inputs(onnx_file):
    session = Session(onnx_file)
    f = feeds(1, 4, vocab=TINY.vocab_size)
    del f["token_type_ids"]
    with pytest.raises(ValueError, match="missing: token_type_ids"):
        session.run(f)
    with pytest.raises(ValueError, match="unknown: extra"):
        session.run({**feeds(1, 4), "extra": np.zeros((1, 4))})


def test_out_of_range_ids_are_refused_when_cast():
    from albert_edge.runtime import _cast
    from albert_edge.formats.graph import TensorSpec

    spec = TensorSpec("input_ids", "int32", (-1, -1))
    assert _cast(np.array([[1, 2]], dtype=np.int64), spec).dtype == np.int32
    with pytest.raises(ValueError, match="outside the range of int32"):
        _cast(np.array([[2**40]], dtype=np.int64), spec)


def test_bad_files(tmp_path):
    with pytest.raises(RuntimeUnavailable, match="no such model file"):
        Session(tmp_path / "missing.onnx")
    (tmp_path / "model.bin").write_bytes(b"\0" * 16)
    with pytest.raises(RuntimeUnavailable, match="unknown model file type '.bin'"):
        Session(tmp_path / "model.bin")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(RuntimeUnavailable, match="onnxruntime cannot load it"):
        Session(tmp_path / "junk.onnx")
    (tmp_path / "junk.tflite").write_bytes(b"not a model either")
    with pytest.raises(RuntimeUnavailable, match="cannot load it"):
        Session(tmp_path / "junk.tflite")
    assert format_of("a/B.TFLITE") == "tflite"


# -- TFLite -------------------------------------------------------------------------------------

def test_tflite_signature_specs(tflite_file):
    session = Session(tflite_file, num_threads=1)
    assert session.format == "tflite" and session.backend_name == "ai_edge_litert"
    assert sorted(session.input_names) == sorted(INPUTS)
    assert all(s.dtype == "int32" and s.shape == (-1, -1) for s in session.inputs)
    assert sorted(session.output_names) == ["last_hidden_state", "pooler_output"]


def test_tflite_casts_int64_and_resizes_to_each_feed(tflite_file):
    session = Session(tflite_file)
    for batch, T in ((1, 3), (2, 7), (3, 2), (2, 7)):
        f = feeds(batch, T, seed=T)
        out = session.run(f)
        hidden, pooled = toy_reference(f["input_ids"], f["attention_mask"], f["token_type_ids"])
        np.testing.assert_array_equal(out["last_hidden_state"], hidden)
        np.testing.assert_array_equal(out["pooler_output"], pooled)


def test_tflite_without_signature_uses_tensor_names(tflite_file, tmp_path):
    flatbuffers = pytest.importorskip("flatbuffers")
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(tflite_file.read_bytes(), 0)
    model.signatureDefs = None
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    bare = tmp_path / "bare.tflite"
    bare.write_bytes(bytes(builder.Output()))

    session = Session(bare)
    by_role = {n.split("_", 2)[-1].split(":")[0]: n for n in session.input_names}  # serving_default_input_ids:0
    f = feeds(2, 5, seed=1)
    out = session.run({by_role[k]: v for k, v in f.items()})
    hidden, pooled = toy_reference(f["input_ids"], f["attention_mask"], f["token_type_ids"])
    results = sorted(out.values(), key=lambda a: a.ndim)
    np.testing.assert_array_equal(results[0], pooled)
    np.testing.assert_array_equal(results[1], hidden)


# -- torch-free ---------------------------------------------------------------------------------

def test_runtime_runs_onnx_and_tflite_without_torch_or_tensorflow(onnx_file, tflite_file, base_model,
                                                                  run_blocked):
    f = feeds(1, 6, vocab=TINY.vocab_size)
    with torch.no_grad():
        hidden, _ = base_model(*(torch.from_numpy(f[n]) for n in INPUTS))
    expected = Path(onnx_file).with_name("expected.npy")
    np.save(expected, hidden.numpy())
    result = run_blocked(f"""
        import numpy as np
        from albert_edge.runtime import Session

        feeds = {{name: np.array(rows) for name, rows in {({k: v.tolist() for k, v in f.items()})!r}.items()}}
        out = Session({str(onnx_file)!r}, num_threads=1).run(feeds)
        np.testing.assert_allclose(out["last_hidden_state"], np.load({str(expected)!r}), atol=1e-5, rtol=0)
        toy = Session({str(tflite_file)!r}).run({{**feeds, "input_ids": feeds["input_ids"] % 10}})
        assert toy["last_hidden_state"].shape == (1, 6, 4)
        leaked = [m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow")]
        assert not leaked and not attempts, (leaked, attempts)
        print("ran")
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ran" in result.stdout


def test_app_defaults_open_files_with_the_runtimes_own_options(onnx_file, tflite_file):
    """app_defaults: onnxruntime's InferenceSession by path with its defaults (memory pattern on, all
    optimizers, SkipLayerNormalization fusion not turned off), the TFLite Interpreter with its
    default XNNPACK and no weight cache; the same outputs as Session's settings."""
    ours, app = Session(onnx_file, num_threads=1), Session(onnx_file, num_threads=1, app_defaults=True)
    ours_options, app_options = (s._backend._session.get_session_options() for s in (ours, app))
    assert not ours_options.enable_mem_pattern and app_options.enable_mem_pattern
    assert app_options.intra_op_num_threads == 1 and app.app_defaults and not ours.app_defaults
    batch = feeds(2, 9)
    for name, value in ours.run(batch).items():
        np.testing.assert_allclose(app.run(batch)[name], value, rtol=0, atol=1e-5)
    tfl_ours, tfl_app = Session(tflite_file), Session(tflite_file, app_defaults=True)
    assert type(tfl_app._backend).__name__ == "InterpreterBackend" and not tfl_app.weights_once  # one subgraph
    assert tfl_ours.weights_once == (type(tfl_ours._backend).__name__ == "CompiledTFLite")
    batch = feeds(2, 7, np.int32)
    for name, value in tfl_ours.run(batch).items():
        np.testing.assert_allclose(tfl_app.run(batch)[name], value, rtol=0, atol=1e-5)
