"""Every kind of .tflite albert-edge writes opens and answers through ai-edge-litert's own Python
``CompiledModel`` (the CPU), as LiteRT's docs show it, in a child process (a mis-sized output
buffer corrupts the heap): at the file's default length with the buffers CompiledModel makes,
and at another length with the README's way around. Compared with the classic Interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert.compiled_model")
torch = pytest.importorskip("torch")

from ai_edge_litert.interpreter import Interpreter  # noqa: E402

from albert_edge import checkpoints  # noqa: E402
from albert_edge.config import AlbertConfig  # noqa: E402
from albert_edge.converters import tflite  # noqa: E402
from albert_edge.converters.export import convert  # noqa: E402
from albert_edge.converters.quantized import quantize_file  # noqa: E402
from albert_edge.model import build_model  # noqa: E402
from albert_edge.quantize import QuantizeConfig  # noqa: E402

TINY = AlbertConfig.preset("tiny").replace(vocab_size=400)  # the test spiece.model's vocabulary
CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus.txt"
N = 16
SCHEMES = ("int8-dynamic", "fp16", "int8-full", "int16x8")  # every TFLite scheme

# At the file's default length: the buffers CompiledModel makes, sized as the file says.
DEFAULT_LENGTH = textwrap.dedent("""
    import sys
    import numpy as np
    from ai_edge_litert.compiled_model import CompiledModel

    path, feeds_path, out_path = sys.argv[1:4]
    model = CompiledModel.from_file(path)
    signature = model.get_signature_list()["serving_default"]
    index = model.get_signature_index("serving_default")
    feeds = np.load(feeds_path)
    inputs, outputs = model.create_input_buffers(index), model.create_output_buffers(index)
    for name, buffer in zip(signature["inputs"], inputs):
        buffer.write(np.ascontiguousarray(feeds[name]))
    model.run_by_index(index, inputs, outputs)
    details = model.get_output_tensor_details("serving_default")
    results = {}
    for name, buffer in zip(signature["outputs"], outputs):
        shape, dtype = details[name]["shape"], np.dtype(details[name]["dtype"])
        results[name] = buffer.read(int(np.prod(shape)), dtype).reshape(shape)
    np.savez(out_path, **results)
""")

# Another length: the README's way around (inputs resized, outputs in host memory of the right size).
OTHER_LENGTH = textwrap.dedent("""
    import sys
    import numpy as np
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.tensor_buffer import TensorBuffer

    path, feeds_path, out_path, T, H = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    feeds = np.load(feeds_path)
    model = CompiledModel.from_file(path)
    signature = model.get_signature_list()["serving_default"]
    for i in range(len(signature["inputs"])):
        model.resize_input_tensor(i, [1, T], 0)
    inputs = model.create_input_buffers(0)  # sized for [1, T] after the resize
    for name, buffer in zip(signature["inputs"], inputs):
        buffer.write(np.ascontiguousarray(feeds[name]))
    arrays = {"last_hidden_state": np.zeros((1, T, H), np.float32), "pooler_output": np.zeros((1, H), np.float32)}
    outputs = [TensorBuffer.create_from_host_memory(arrays[name]) for name in signature["outputs"]]
    model.run_by_index(0, inputs, outputs)
    np.savez(out_path, last_hidden_state=outputs[signature["outputs"].index("last_hidden_state")]
             .read(T * H, np.float32).reshape(1, T, H))
""")


# One loaded model resized from run to run, as an app resizes per input, with the buffers
# CompiledModel makes after each resize: sized from the shapes the file's graph gives the outputs,
# which must follow the resize before the run (a file whose output shapes are known only once it
# has run got buffers of the run before, and a longer input wrote past them).
RESIZED = textwrap.dedent("""
    import sys
    import numpy as np
    from ai_edge_litert.compiled_model import CompiledModel

    path, feeds_path, out_path = sys.argv[1:4]
    lengths = [int(T) for T in sys.argv[4:]]
    saved = np.load(feeds_path)
    model = CompiledModel.from_file(path)
    signature = model.get_signature_list()["serving_default"]
    results = {}
    for T in lengths:
        for i in range(len(signature["inputs"])):
            model.resize_input_tensor(i, [1, T], 0)
        inputs, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
        for name, buffer in zip(signature["inputs"], inputs):
            buffer.write(np.ascontiguousarray(saved[f"{name}.{T}"]))
        try:
            model.run_by_index(0, inputs, outputs)
        except RuntimeError as exc:
            results[f"error.{T}"] = np.array(str(exc))
            continue
        details = model.get_output_tensor_details("serving_default")
        for name, buffer in zip(signature["outputs"], outputs):
            shape, dtype = details[name]["shape"], np.dtype(details[name]["dtype"])
            results[f"{name}.{T}"] = buffer.read(int(np.prod(shape)), dtype).reshape(shape)
    np.savez(out_path, **results)
""")


def _feeds(T: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(T)
    mask = np.ones((1, T), np.int32)
    mask[0, -2:] = 0
    types = np.zeros((1, T), np.int32)
    types[0, T // 2:] = 1
    return {"input_ids": rng.integers(5, TINY.vocab_size, size=(1, T)).astype(np.int32),
            "attention_mask": mask, "token_type_ids": types}


def _interpreter(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    runner = Interpreter(model_path=str(path)).get_signature_runner("serving_default")
    return {name: np.array(value) for name, value in runner(**feeds).items()}


def _in_child(script: str, path: Path, feeds: dict[str, np.ndarray], tmp: Path, *extra: str) -> dict[str, np.ndarray]:
    np.savez(tmp / "feeds.npz", **feeds)
    done = subprocess.run([sys.executable, "-c", script, str(path), str(tmp / "feeds.npz"), str(tmp / "out.npz"),
                           *extra], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    with np.load(tmp / "out.npz") as saved:
        return dict(saved)


@pytest.fixture(scope="module")
def files(tmp_path_factory, spiece_model) -> dict[str, Path]:
    """One file of each kind: dynamic loop and unrolled, static, and every scheme's file quantize
    writes from the dynamic one (what is checked
    here is how CompiledModel sizes the buffers; int8-full and int16x8 calibrate on real text)."""
    torch.manual_seed(0)
    model = build_model(TINY, "base")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    root = tmp_path_factory.mktemp("compiled")
    ckpt = checkpoints.save(model, root / "ckpt")
    convert(str(ckpt), root / "loop", targets=("tflite",), seq_len=N)
    made = {"dynamic loop": root / "loop" / "model.tflite",
            "dynamic unrolled": tflite.export(model, root / "unrolled.tflite", seq_len=N, layers="unrolled"),
            "static": tflite.export(model, root / "static.tflite", seq_len=N, static=True)}
    for scheme in SCHEMES:
        config = QuantizeConfig(scheme, calibration=(str(CORPUS),), tokenizer=spiece_model, num_samples=8,
                                eval_samples=4)
        made[scheme] = quantize_file(made["dynamic loop"], config).out_path
    return made


@pytest.mark.parametrize("kind", ["dynamic loop", "dynamic unrolled", "static", *SCHEMES])
def test_compiled_model_at_the_default_length(files, kind, tmp_path):
    path, feeds = files[kind], _feeds(N)
    got = _in_child(DEFAULT_LENGTH, path, feeds, tmp_path)
    want = _interpreter(path, feeds)
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
        assert np.abs(got[name] - want[name]).max() <= 1e-5 * max(1.0, np.abs(want[name]).max()), name


@pytest.mark.parametrize("T", [8, 32])
def test_compiled_model_at_another_length_the_readme_way(files, T, tmp_path):
    path, feeds = files["dynamic unrolled"], _feeds(T)
    got = _in_child(OTHER_LENGTH, path, feeds, tmp_path, str(T), str(TINY.hidden_size))
    want = _interpreter(path, feeds)["last_hidden_state"]
    assert np.abs(got["last_hidden_state"] - want).max() <= 1e-5


@pytest.mark.parametrize("kind", ["dynamic loop", "dynamic unrolled", "int8-dynamic", "int8-full"])
def test_compiled_model_follows_every_resize(files, kind, tmp_path):
    """7 -> 16 -> the longest input the file was built for -> one past it: the same answers as the
    Interpreter's, then a Python error (the position table has no row for it), never a crash."""
    path, built = files[kind], TINY.max_position_embeddings
    lengths = (7, 16, built, built + 1)
    feeds = {f"{name}.{T}": value for T in lengths for name, value in _feeds(T).items()}
    got = _in_child(RESIZED, path, feeds, tmp_path, *map(str, lengths))
    for T in lengths[:-1]:
        for name, want in _interpreter(path, _feeds(T)).items():
            assert got[f"{name}.{T}"].shape == want.shape, (name, T)
            assert np.abs(got[f"{name}.{T}"] - want).max() <= 1e-5 * max(1.0, np.abs(want).max()), (name, T)
    assert "Failed to invoke" in str(got[f"error.{built + 1}"])
