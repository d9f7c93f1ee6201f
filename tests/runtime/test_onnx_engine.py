"""How Session opens .onnx files for a small process (albert_edge.runtime.onnx_engine), and files whose
graph onnxruntime optimized offline (albert_edge.quantize.ort_optimize): real onnxruntime
sessions on a tiny int8 ALBERT."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from albert_edge.errors import AlbertEdgeError, ConversionError  # noqa: E402
from albert_edge.runtime import Session  # noqa: E402
from albert_edge.runtime.onnx_engine import (
    OPTIMIZED_KEY,
    in_place_model,
    optimized_by,
    read_metadata,
    return_freed_memory,
    session_options,
)

FUSED = {"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}  # what int8 MatMuls become in onnxruntime


@pytest.fixture(scope="module")
def int8(tmp_path_factory):
    """A small ALBERT (G=2 < L=4) converted to ONNX and quantized int8-dynamic."""
    torch = pytest.importorskip("torch")
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model
    from albert_edge.quantize import QuantizeConfig, quantize

    from ..quantize.conftest import small_config

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("ort-memory")
    convert(build_model(small_config(), "base"), out / "fp32", targets=("onnx",), seq_len=8)
    quantize(out / "fp32" / "model.onnx", QuantizeConfig("int8-dynamic", eval_samples=2, seq_len=8),
             out / "model.int8.onnx")
    return out / "model.int8.onnx"


@pytest.fixture(scope="module")
def optimized(int8, tmp_path_factory):
    from albert_edge.quantize.ort_optimize import optimize_for_onnxruntime

    return optimize_for_onnxruntime(int8, tmp_path_factory.mktemp("optimized") / "model.int8.onnx")


def _feeds(seq: int, batch: int = 2) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seq).integers(5, 400, size=(batch, seq))
    mask = np.ones_like(ids)
    mask[-1, seq // 2:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _options(session: Session):
    return session._backend._session.get_session_options()


def _model(path, **metadata):
    """A one-node ONNX model with ``metadata`` in its metadata_props."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    helper.set_model_props(model, metadata)
    onnx.save(model, str(path))
    return path


# -- the metadata reader ------------------------------------------------------------------------

@pytest.mark.parametrize("metadata", [{}, {"a": "1"}, {OPTIMIZED_KEY: "1.31.1", "producer note": "ünïcode"}])
def test_read_metadata_gives_what_onnx_wrote(tmp_path, metadata):
    assert read_metadata(_model(tmp_path / "m.onnx", **metadata)) == metadata


def test_read_metadata_reads_what_the_quantizer_wrote(int8):
    assert read_metadata(int8) == {p.key: p.value for p in onnx.load(str(int8)).metadata_props}
    assert optimized_by(int8) is None


@pytest.mark.parametrize("damage", [
    lambda raw: b"",
    lambda raw: raw[: len(raw) // 2],  # the graph field runs past the end
    lambda raw: b"\xff" * 64,  # a varint that never ends
    lambda raw: b"\x0f" + raw,  # wire type 7 does not exist
    lambda raw: b"TFL3" + raw,
], ids=["empty", "truncated", "endless-varint", "bad-wire-type", "tflite-header"])
def test_read_metadata_of_a_damaged_file_is_empty(tmp_path, damage):
    raw = _model(tmp_path / "good.onnx", **{OPTIMIZED_KEY: "1"}).read_bytes()
    path = tmp_path / "bad.onnx"
    path.write_bytes(damage(raw))
    assert read_metadata(path) == {}
    assert read_metadata(tmp_path / "missing.onnx") == {}


def test_read_metadata_skips_the_graph_instead_of_reading_it(tmp_path, monkeypatch):
    """A 4 MB initializer: the reader's reads add up to a few hundred bytes, not the file."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((1024, 1024), dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024, 1024])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    helper.set_model_props(model, {OPTIMIZED_KEY: "x"})
    path = tmp_path / "big.onnx"
    onnx.save(model, str(path))
    read = []
    real_open = open

    class Counting:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            data = self.f.read(n)
            read.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    import albert_edge.runtime.onnx_engine as module

    monkeypatch.setattr(module, "open", lambda *a, **k: Counting(real_open(*a, **k)), raising=False)
    assert read_metadata(path) == {OPTIMIZED_KEY: "x"}
    assert 0 < sum(read) < 1024 < path.stat().st_size // 1000


# -- weights mapped from the file ------------------------------------------------------------------

def _mapped(path) -> bool:
    """Whether this process maps ``path`` (onnxruntime maps external data it reads in place)."""
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(str(path.resolve())) for line in f)


def test_in_place_model_points_each_large_initializer_at_its_own_bytes(int8):
    """The small model's weights are 1-4 KiB: a lower threshold than the default moves them."""
    raw = int8.read_bytes()
    data = in_place_model(int8, min_bytes=1024)
    assert data is not None
    model, source = onnx.load_from_string(data), onnx.load(str(int8))
    by_name = {t.name: t for t in source.graph.initializer}
    moved = []
    for tensor in model.graph.initializer:
        original = by_name[tensor.name]
        assert list(tensor.dims) == list(original.dims) and tensor.data_type == original.data_type
        if len(original.raw_data) < 1024:
            assert tensor.raw_data == original.raw_data and tensor.data_location != onnx.TensorProto.EXTERNAL
            continue
        ref = {e.key: e.value for e in tensor.external_data}
        assert tensor.data_location == onnx.TensorProto.EXTERNAL and ref["location"] == int8.name
        offset, length = int(ref["offset"]), int(ref["length"])
        assert raw[offset:offset + length] == original.raw_data
        moved.append(length)
    assert len(moved) >= 6
    assert len(data) < len(raw) - sum(moved) + 128 * len(moved)  # the weights left, a reference came
    assert in_place_model(int8, min_bytes=1 << 30) is None  # nothing to move: load by path
    assert [n.SerializeToString() for n in model.graph.node] == [n.SerializeToString() for n in source.graph.node]


@pytest.mark.parametrize("location, moves", [("DEFAULT", True), ("EXTERNAL", False)])
def test_in_place_model_reads_data_location(tmp_path, location, moves):
    """The quantizer writes data_location DEFAULT beside raw_data; EXTERNAL means not ours to move."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.arange(4096).astype(np.int8), "w")
    weight.data_location = getattr(TensorProto, location)
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [4096])], [weight])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    data = in_place_model(path)
    assert (data is not None) == moves
    if moves:
        ref = {e.key: e.value for e in onnx.load_from_string(data).graph.initializer[0].external_data}
        raw = path.read_bytes()
        assert raw[int(ref["offset"]):int(ref["offset"]) + int(ref["length"])] == weight.raw_data


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/maps"), reason="needs /proc")
def test_session_maps_the_weights_from_the_file(int8, tmp_path):
    copy = tmp_path / "mapped.onnx"
    copy.write_bytes(int8.read_bytes())
    session = Session(copy, num_threads=1)
    assert _mapped(copy)
    session.run(_feeds(4))


def test_session_falls_back_to_the_path_when_in_place_loading_fails(int8, tmp_path, monkeypatch):
    """An onnxruntime without the folder setting looks for the data beside the working directory."""
    import albert_edge.runtime.onnx_engine as module

    copy = tmp_path / "model" / "fallback.onnx"
    copy.parent.mkdir()
    copy.write_bytes(int8.read_bytes())
    monkeypatch.setattr(module, "_FOLDER_KEY", "session.no_such_setting")
    monkeypatch.chdir(tmp_path)
    feeds = _feeds(6)
    got = Session(copy, num_threads=1).run(feeds)
    assert not _mapped(copy)
    want = Session(int8, num_threads=1).run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_a_same_named_file_in_the_working_directory_is_never_read(int8, tmp_path, monkeypatch):
    """Without the folder setting onnxruntime reads a bytes-loaded model's data beside the working
    directory: a different file of the same name there must make Session load by path."""
    import albert_edge.runtime.onnx_engine as module

    (tmp_path / "model").mkdir()
    (tmp_path / "cwd").mkdir()
    mine = tmp_path / "model" / "same.onnx"
    mine.write_bytes(int8.read_bytes())
    decoy = tmp_path / "cwd" / "same.onnx"
    decoy.write_bytes(bytes(len(int8.read_bytes())))  # zeros where the weights would be
    monkeypatch.setattr(module, "_FOLDER_KEY", "session.no_such_setting")  # as an old onnxruntime
    monkeypatch.chdir(tmp_path / "cwd")
    feeds = _feeds(5)
    got = Session(mine, num_threads=1).run(feeds)
    assert not _mapped(decoy) and not _mapped(mine)
    want = Session(int8, num_threads=1).run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    monkeypatch.chdir(tmp_path / "model")  # the same file there: mapped as usual
    session = Session(mine, num_threads=1)
    assert _mapped(mine)
    session.run(feeds)


def test_a_file_with_external_data_loads_as_it_is(tmp_path):
    """Weights already in a .data file are left where they are (their location is the folder's)."""
    torch = pytest.importorskip("torch")
    from albert_edge.converters.onnx import export
    from albert_edge.model import build_model

    from ..quantize.conftest import small_config

    torch.manual_seed(0)

    model = build_model(small_config(), "base").eval()
    inline, external = tmp_path / "inline" / "m.onnx", tmp_path / "external" / "m.onnx"
    inline.parent.mkdir()
    external.parent.mkdir()
    export(model, inline, seq_len=8)
    export(model, external, seq_len=8, external_data_threshold=1)
    assert (external.parent / "m.onnx.data").is_file()
    assert in_place_model(external) is None
    feeds = _feeds(7)
    want, got = Session(inline, num_threads=1).run(feeds), Session(external, num_threads=1).run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("damage", [lambda raw: raw[:-3], lambda raw: raw[:100] + b"\xff" * 8 + raw[108:]],
                         ids=["truncated", "garbled"])
def test_damaged_onnx_gives_the_same_one_line_as_before(int8, tmp_path, damage):
    path = tmp_path / "bad.onnx"
    path.write_bytes(damage(int8.read_bytes()))
    with pytest.raises(AlbertEdgeError, match="onnxruntime cannot load it") as caught:
        Session(path, num_threads=1)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


FREED = r"""
import ctypes, sys
from albert_edge.runtime.onnx_engine import return_freed_memory
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) // 1024
blocks = [libc.malloc(4000) for _ in range(8000)]  # 32 MB in small blocks, below glibc's mmap threshold
for b in blocks:
    ctypes.memset(b, 1, 4000)
keep = libc.malloc(4000)  # holds the heap's top, so freeing the rest cannot shrink it from the end
for b in blocks:
    libc.free(b)
before = rss()
print(return_freed_memory(), before, rss())
"""


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_return_freed_memory_gives_the_heap_back():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FREED], capture_output=True, text=True, timeout=60)
    ok, before, after = done.stdout.split()
    assert ok == "True" and int(before) - int(after) >= 20, done.stdout


def test_return_freed_memory_without_malloc_trim_does_nothing():
    assert return_freed_memory(libc=object()) is False


# -- the session options --------------------------------------------------------------------------

def test_session_keeps_no_memory_pattern_and_optimizes_a_plain_file(int8):
    session = Session(int8, num_threads=1)
    options = _options(session)
    assert options.enable_mem_pattern is False
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert options.intra_op_num_threads == 1


def test_session_opens_an_optimized_file_with_the_optimizers_off(optimized):
    options = _options(Session(optimized, num_threads=1))
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert options.enable_mem_pattern is False


@pytest.mark.parametrize("provider", ["cuda", "tensorrt", "CUDAExecutionProvider"])
def test_other_providers_optimize_an_optimized_file_again(optimized, provider):
    """Another provider fuses for its own kernels: the CPU graph is only a starting point there."""
    options = session_options(ort, optimized, 1, provider)
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert session_options(ort, optimized, 1, "cpu").graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL


@pytest.mark.parametrize("seq", [1, 8, 33])
def test_session_outputs_equal_the_raw_runtime_with_its_defaults(int8, seq):
    """Session's options change memory, not results: onnxruntime's own defaults give the same."""
    raw = ort.InferenceSession(str(int8), providers=["CPUExecutionProvider"])
    feeds = _feeds(seq)
    want = raw.run(None, feeds)
    got = Session(int8, num_threads=1).run(feeds)
    for name, value in zip([o.name for o in raw.get_outputs()], want):
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)


# -- optimizing offline ----------------------------------------------------------------------------

def test_optimized_file_is_fused_marked_and_gives_the_same_outputs(int8, optimized):
    source, model = onnx.load(str(int8)), onnx.load(str(optimized))
    ops = {n.op_type for n in model.graph.node}
    assert FUSED & ops and not FUSED & {n.op_type for n in source.graph.node}
    assert len(model.graph.node) < len(source.graph.node)
    assert optimized_by(optimized) == ort.__version__
    kept = {p.key: p.value for p in source.metadata_props}
    assert {k: v for k, v in read_metadata(optimized).items() if k != OPTIMIZED_KEY} == kept
    a, b = Session(int8, num_threads=1), Session(optimized, num_threads=1)
    for seq in (1, 8, 40):
        feeds = _feeds(seq)
        want, got = a.run(feeds), b.run(feeds)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_optimized_file_stores_each_weight_once(int8, optimized):
    from albert_edge.formats.weights import analyze, read_file

    before, after = analyze(read_file(int8)), analyze(read_file(optimized))
    assert not after.duplicates
    assert after.stored_bytes <= before.stored_bytes * 1.005 + 64 * 1024
    assert after.stored_bytes >= before.stored_bytes * 0.95  # the weights are all still there


def test_optimizing_an_optimized_file_keeps_one_mark(optimized, tmp_path):
    from albert_edge.quantize.ort_optimize import optimize_for_onnxruntime

    again = optimize_for_onnxruntime(optimized, tmp_path / "again.onnx")
    keys = [p.key for p in onnx.load(str(again)).metadata_props]
    assert keys.count(OPTIMIZED_KEY) == 1


def test_optimize_in_place_replaces_the_file(int8, tmp_path):
    """What quantize does with its staged file: the same path in and out, with force."""
    from albert_edge.quantize.ort_optimize import optimize_for_onnxruntime

    path = tmp_path / "staged.onnx"
    path.write_bytes(int8.read_bytes())
    feeds = _feeds(9)
    want = Session(int8, num_threads=1).run(feeds)
    assert optimize_for_onnxruntime(path, path, force=True) == path
    assert optimized_by(path) == ort.__version__
    got = Session(path, num_threads=1).run(feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["staged.onnx"]  # no temporary left


def test_optimize_refuses_an_existing_output_unless_forced(int8, tmp_path):
    from albert_edge.quantize.ort_optimize import optimize_for_onnxruntime

    out = tmp_path / "mine.onnx"
    out.write_bytes(b"a user's file")
    with pytest.raises(AlbertEdgeError, match="exists"):
        optimize_for_onnxruntime(int8, out)
    assert out.read_bytes() == b"a user's file"
    optimize_for_onnxruntime(int8, out, force=True)
    assert optimized_by(out) == ort.__version__


@pytest.mark.parametrize("content, says", [
    (None, "no such file"),
    (b"\x08\x07garbage that is no model", "onnxruntime cannot load it"),
])
def test_optimize_a_bad_source_gives_one_line_and_no_file(tmp_path, content, says):
    from albert_edge.quantize.ort_optimize import optimize_for_onnxruntime

    src = tmp_path / "bad.onnx"
    if content is not None:
        src.write_bytes(content)
    with pytest.raises(ConversionError, match=says) as caught:
        optimize_for_onnxruntime(src, tmp_path / "out.onnx")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out.onnx").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["bad.onnx"] if content is not None else [])


def test_the_checks_catch_a_file_that_is_not_the_source(int8, tmp_path):
    """The parity check is real: another model's file in place of the optimized one fails it."""
    import torch

    from albert_edge.converters.export import convert
    from albert_edge.model import build_model
    from albert_edge.quantize.ort_optimize import _problems

    from ..quantize.conftest import small_config

    torch.manual_seed(1)
    convert(build_model(small_config(), "base"), tmp_path / "other", targets=("onnx",), seq_len=8)
    problems = _problems(int8, tmp_path / "other" / "model.onnx", 8, 1)
    assert any("differs from the source's" in p for p in problems), problems
