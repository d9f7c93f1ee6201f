"""Reading .tflite files back: signature, op histogram, every stored buffer once, files with
weights stored by offset, and no torch or tensorflow needed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorflow")
litert = pytest.importorskip("ai_edge_litert.interpreter")
flatbuffers = pytest.importorskip("flatbuffers")

from ai_edge_litert import schema_py_generated as schema  # noqa: E402

from albert_edge.config import AlbertConfig  # noqa: E402
from albert_edge.converters import tflite  # noqa: E402
from albert_edge.formats.tflite_reader import read  # noqa: E402
from albert_edge.model import build_model  # noqa: E402

TINY = AlbertConfig.preset("tiny")


@pytest.fixture(scope="module")
def mlm():
    """A tiny masked-LM model: its decoder is tied to the word-embedding table."""
    torch.manual_seed(0)
    model = build_model(TINY, "mlm")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module")
def mlm_file(mlm, tmp_path_factory):
    # unrolled: the op counts below are one per layer application (a loop file holds its body once)
    return tflite.export(mlm, tmp_path_factory.mktemp("reader") / "mlm.tflite", seq_len=12, layers="unrolled")


def _summary(contents) -> dict:
    return {
        "inputs": [[s.name, s.dtype, list(s.shape)] for s in contents.inputs],
        "outputs": [[s.name, s.dtype, list(s.shape)] for s in contents.outputs],
        "ops": dict(sorted(contents.ops.items())),
        "weights": [[w.name, w.dtype, list(w.shape), float(np.asarray(w.data, np.float64).sum())]
                    for w in contents.weights],
        "stored": contents.stored_weight_bytes,
    }


def _weights(summary: dict) -> list:
    return [w for w in summary["weights"] if w[1] == "float32" and w[2] and np.prod(w[2]) > 1]


def test_signature_ops_and_metadata(mlm_file):
    contents = read(mlm_file)
    assert contents.format == "tflite"
    assert {s.name: (s.dtype, s.shape) for s in contents.inputs} == {
        "input_ids": ("int32", (-1, -1)), "attention_mask": ("int32", (-1, -1)), "token_type_ids": ("int32", (-1, -1)),
    }
    assert [(s.name, s.dtype, s.shape) for s in contents.outputs] == [("prediction_logits", "float32", (-1, -1, 99))]
    # tiny: L=4 layer applications, each with Q/K/V/dense/ffn/ffn_output; two attention matmuls each.
    assert contents.ops["BATCH_MATMUL"] == 2 * 4
    assert contents.ops["SOFTMAX"] == 4
    # word, position (gathered by index: a dynamic file's shapes are known when LiteRT prepares it) and
    # token-type embeddings
    assert contents.ops["GATHER"] == 3
    assert all(name.isupper() for name in contents.ops)  # builtin names, not numeric codes
    assert contents.metadata["schema_version"] == 3
    assert contents.metadata["signatures"] == ["serving_default"]


def test_weights_are_the_model_parameters(mlm, mlm_file):
    contents = read(mlm_file)
    table = mlm.albert.embeddings.word_embeddings.weight.detach().numpy()
    matches = [w for w in contents.weights if w.shape == table.shape and np.array_equal(w.data, table)]
    # The tied word-embedding table is stored once and read by both the lookup and the decoder.
    assert len(matches) == 1
    assert set(matches[0].consumers) == {"GATHER", "FULLY_CONNECTED"}
    assert not matches[0].data.flags.writeable
    floats = sum(w.nbytes for w in contents.weights if w.dtype == "float32" and w.data.size > 1)
    assert floats == sum(p.numel() * 4 for p in mlm.parameters())


def _repack(flatbuffer: bytes, edit) -> bytes:
    """Unpack a .tflite with the schema's object API, apply ``edit`` to it, pack it again."""
    model = schema.ModelT.InitFromPackedBuf(bytearray(flatbuffer), 0)
    edit(model)
    builder = flatbuffers.Builder(len(flatbuffer) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def test_tensors_sharing_a_buffer_are_one_stored_tensor(mlm_file, tmp_path):
    before = read(mlm_file)
    chosen: dict[str, str] = {}

    def share(model) -> None:
        # Point the first two same-shaped square weights at one buffer.
        tensors = model.subgraphs[0].tensors
        square = [t for t in tensors if t.buffer > 0 and list(t.shape) == [16, 16]]
        first, second = square[0], square[1]
        chosen.update(first=first.name.decode(), second=second.name.decode())
        second.buffer = first.buffer

    path = tmp_path / "shared.tflite"
    path.write_bytes(_repack(mlm_file.read_bytes(), share))
    after = read(path)
    names = [w.name for w in after.weights]
    assert len(after.weights) == len(before.weights) - 1
    assert (chosen["first"] in names) != (chosen["second"] in names)  # one entry, one name
    assert after.stored_weight_bytes == before.stored_weight_bytes - 16 * 16 * 4


def test_weights_stored_by_offset_read_the_same(mlm, mlm_file, tmp_path):
    """The layout the converter uses past 2 GiB: buffers after the flatbuffer, by offset."""
    path = tmp_path / "offset.tflite"
    path.write_bytes(tflite.convert(mlm, seq_len=12, buffer_offset=True, layers="unrolled"))
    model = schema.Model.GetRootAs(path.read_bytes(), 0)
    assert any(model.Buffers(i).Offset() > 1 for i in range(model.BuffersLength()))
    by_offset, inline = _summary(read(path)), _summary(read(mlm_file))
    for key in ("inputs", "outputs", "ops"):
        assert by_offset[key] == inline[key]
    # The same weights; the in-line writer also merges equal scalar constants into one buffer.
    assert _weights(by_offset) == _weights(inline)
    # and the interpreter agrees with PyTorch on it
    ids = np.array([[2, 17, 33, 5, 3]], np.int32)
    runner = litert.Interpreter(model_path=str(path)).get_signature_runner("serving_default")
    got = runner(input_ids=ids, attention_mask=np.ones_like(ids), token_type_ids=np.zeros_like(ids))
    with torch.no_grad():
        want = mlm(torch.from_numpy(ids).long()).numpy()
    np.testing.assert_allclose(got["prediction_logits"], want, rtol=0, atol=1e-4)


@pytest.mark.parametrize("data", [b"", b"not a model at all", b"\x1c\x00\x00\x00TFL3" + b"\xff" * 24])
def test_not_a_tflite_file_is_a_value_error(tmp_path, data):
    path = tmp_path / "bad.tflite"
    path.write_bytes(data)
    with pytest.raises(ValueError, match="bad.tflite"):
        read(path)


@pytest.mark.parametrize("blocked", [("torch", "tensorflow"), ("torch", "tensorflow", "ai_edge_litert", "flatbuffers")],
                         ids=["no-torch-tensorflow", "tflite-runtime-only"])
def test_reads_without_torch_or_tensorflow(mlm_file, blocked):
    """On a device: without ai-edge-litert (tflite-runtime ships no schema bindings) the reader
    reads the same through its standard-library stand-in."""
    script = textwrap.dedent(
        """
        import importlib.abc, json, sys

        class Blocked(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in sys.argv[2].split(","):
                    raise ImportError(name + " is not installed on this device")

        sys.meta_path.insert(0, Blocked())
        import numpy as np
        from albert_edge.formats.tflite_reader import read

        c = read(sys.argv[1])
        print(json.dumps({
            "inputs": [[s.name, s.dtype, list(s.shape)] for s in c.inputs],
            "outputs": [[s.name, s.dtype, list(s.shape)] for s in c.outputs],
            "ops": dict(sorted(c.ops.items())),
            "weights": [[w.name, w.dtype, list(w.shape), float(np.asarray(w.data, np.float64).sum())]
                        for w in c.weights],
            "stored": c.stored_weight_bytes,
            "modules": sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[2].split(",")),
        }))
        """
    )
    done = subprocess.run([sys.executable, "-c", script, str(mlm_file), ",".join(blocked)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen.pop("modules") == []
    assert seen == json.loads(json.dumps(_summary(read(mlm_file))))


@pytest.fixture(params=["inline", "offset"])
def any_layout(request, mlm, mlm_file, tmp_path):
    if request.param == "inline":
        return mlm_file
    path = tmp_path / "offset.tflite"
    path.write_bytes(tflite.convert(mlm, seq_len=12, buffer_offset=True, layers="unrolled"))
    return path


def test_the_standard_library_schema_reads_what_the_bindings_read(any_layout, monkeypatch):
    """Every value the reader takes from the file, through tflite_schema and through
    ai-edge-litert's generated bindings."""
    from albert_edge.formats import tflite_reader, tflite_schema

    assert {k: v for k, v in vars(tflite_schema.TensorType).items() if not k.startswith("_")} == {
        k: v for k, v in vars(schema.TensorType).items() if not k.startswith("_") and v <= 18}
    assert all(getattr(schema.BuiltinOperator, k) == v
               for k, v in vars(tflite_schema.BuiltinOperator).items() if not k.startswith("_"))
    bindings = read(any_layout)
    monkeypatch.setattr(tflite_reader, "schema_module", lambda: tflite_schema)
    stand_in = read(any_layout)
    assert stand_in.inputs == bindings.inputs and stand_in.outputs == bindings.outputs
    assert stand_in.ops == bindings.ops and stand_in.metadata == bindings.metadata
    assert [(w.name, w.dtype, w.shape, w.consumers) for w in stand_in.weights] == [
        (w.name, w.dtype, w.shape, w.consumers) for w in bindings.weights]
    assert all(np.array_equal(a.data, b.data) for a, b in zip(stand_in.weights, bindings.weights))


def test_the_standard_library_schema_reads_while_options_as_the_bindings_do(mlm, tmp_path):
    """A loop file's WHILE operators: their condition and body subgraphs, and the buffers' sizes."""
    from albert_edge.formats import tflite_schema

    raw = tflite.convert(mlm, seq_len=12, layers="loop")

    def loops(module) -> list[tuple[int, int, int]]:
        model = module.Model.GetRootAs(bytes(raw), 0)
        main, found = model.Subgraphs(0), []
        for op in map(main.Operators, range(main.OperatorsLength())):
            options = module.WhileOptions()
            table = op.BuiltinOptions()
            if table is not None and op.BuiltinOptionsType() == schema.BuiltinOptions.WhileOptions:
                options.Init(table.Bytes, table.Pos)
                found.append((options.CondSubgraphIndex(), options.BodySubgraphIndex(), op.BuiltinOptionsType()))
        return found + [(model.Buffers(i).DataLength(), 0, 0) for i in range(model.BuffersLength())]

    found = loops(tflite_schema)
    assert found == loops(schema) and sum(1 for c, b, t in found if t) == 2  # G=2: a WHILE per group


@pytest.mark.parametrize("cut", [12, 100, 1000])
def test_the_standard_library_schema_refuses_a_cut_file(mlm_file, tmp_path, monkeypatch, cut):
    from albert_edge.formats import tflite_reader, tflite_schema

    monkeypatch.setattr(tflite_reader, "schema_module", lambda: tflite_schema)
    path = tmp_path / "cut.tflite"
    path.write_bytes(mlm_file.read_bytes()[:cut])
    with pytest.raises(ValueError, match="cut.tflite"):
        read(path)
