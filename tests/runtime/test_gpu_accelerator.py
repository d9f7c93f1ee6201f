"""albert_edge.runtime.accelerator: LiteRT's GPU accelerator itself (WebGPU over Vulkan; Mesa's
lavapipe on a machine without a GPU, installed by .ci/gpu.sh) says which operators of a file it
takes, which it leaves on the CPU and why, and refuses a dynamic-shape file in one clear line.
Skipped, with the reason, where there is no Vulkan device."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from albert_edge.errors import user_message
from albert_edge.runtime.accelerator import (
    NO_VULKAN_FIX,
    NoVulkanDevice,
    StaticShapeOnly,
    gpu_placement,
    run_on_gpu,
    vulkan_available,
)

pytest.importorskip("ai_edge_litert.compiled_model")

T, V, E = 8, 20, 4


def _needs_vulkan() -> None:
    reason = vulkan_available()
    if reason is not None:
        pytest.skip(f"no Vulkan device for LiteRT's GPU accelerator: {reason} ({NO_VULKAN_FIX})")


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and user_message(exc) == text
    return text


@pytest.fixture(scope="module")
def dynamic_file(tmp_path_factory) -> Path:
    """A tiny ALBERT as `convert --to tflite` writes it: (batch, sequence) inputs, both dynamic."""
    _needs_vulkan()
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    from albert_edge.converters import tflite

    from ..converters.conftest import tiny_model

    return tflite.export(tiny_model(), tmp_path_factory.mktemp("gpu") / "model.tflite", seq_len=16,
                         layers="unrolled")


@pytest.fixture(scope="module")
def static_files(tmp_path_factory) -> dict[str, Path]:
    """Two [1, T] embedding lookups, written by the TFLite converter in a separate process (this
    one never imports tensorflow): "rows2d" gathers with the (1, T) ids as they come, which the
    accelerator leaves on the CPU; "rows1d" reshapes them to (T,) first, which it takes."""
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("gpu-static")
    code = textwrap.dedent(f"""
        import numpy as np, tensorflow as tf

        class Lookup(tf.Module):
            def __init__(self):
                self.table = tf.Variable(np.random.default_rng(0).normal(size=({V}, {E})).astype(np.float32))

            @tf.function(input_signature=[tf.TensorSpec([1, {T}], tf.int32, name="ids")])
            def rows2d(self, ids):
                return {{"rows": tf.nn.relu(tf.gather(self.table, ids))}}

            @tf.function(input_signature=[tf.TensorSpec([1, {T}], tf.int32, name="ids")])
            def rows1d(self, ids):
                rows = tf.gather(self.table, tf.reshape(ids, [{T}]))
                return {{"rows": tf.nn.relu(tf.reshape(rows, [1, {T}, {E}]))}}

        m = Lookup()
        for name in ("rows2d", "rows1d"):
            fn = getattr(m, name).get_concrete_function()
            conv = tf.lite.TFLiteConverter.from_concrete_functions([fn], m)
            open(f"{out}/{{name}}.tflite", "wb").write(conv.convert())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"TF_CPP_MIN_LOG_LEVEL": "2", **os.environ})
    assert done.returncode == 0, done.stderr[-2000:]
    return {name: out / f"{name}.tflite" for name in ("rows2d", "rows1d")}


def _ids() -> np.ndarray:
    return (np.arange(T, dtype=np.int32)[None] * 7) % V


def test_a_dynamic_file_leaves_its_shape_arithmetic_on_the_cpu(dynamic_file):
    """A dynamic file's shapes are worked out when LiteRT prepares it (so CompiledModel follows every
    resize): the accelerator takes its layers and leaves SHAPE and what follows the input's length to
    the CPU, each with its reason."""
    placement = gpu_placement(dynamic_file)
    assert not placement.refused and not placement.all_on_gpu
    assert 0 < placement.gpu_ops < placement.ops and placement.gpu_ops + placement.cpu_ops == placement.ops
    assert "SHAPE" in {f.op for f in placement.fallbacks}
    assert placement.adapter and placement.runtime.startswith("ai-edge-litert ")


def test_the_refusal_is_one_line_naming_the_fix(dynamic_file):
    with pytest.raises(StaticShapeOnly) as caught:
        gpu_placement(dynamic_file).check()
    text = _one_line(caught.value)
    assert text.startswith(f"{dynamic_file}: the GPU accelerator takes static-shape files only: "
                           "convert with a fixed length")
    assert "[-1, -1]" in text


def test_running_a_dynamic_file_on_the_gpu_is_the_same_one_line(dynamic_file):
    feeds = {name: np.ones((1, 16), np.int32) for name in ("input_ids", "attention_mask", "token_type_ids")}
    with pytest.raises(StaticShapeOnly, match="takes static-shape files only: convert with a fixed length") as caught:
        run_on_gpu(dynamic_file, feeds)
    _one_line(caught.value)


def test_an_operator_left_on_the_cpu_is_named_with_the_accelerators_reason(static_files):
    _needs_vulkan()
    placement = gpu_placement(static_files["rows2d"])
    assert not placement.refused and 0 < placement.cpu_ops and placement.gpu_ops + placement.cpu_ops == placement.ops
    assert [(f.op, f.reason) for f in placement.fallbacks] == [("GATHER", "Only support 1D indices")]


def test_a_static_file_in_ops_it_takes_runs_whole_on_the_gpu(static_files):
    _needs_vulkan()
    path = static_files["rows1d"]
    placement = gpu_placement(path)
    assert placement.all_on_gpu and placement.gpu_ops == placement.ops and placement.fallbacks == ()
    from ai_edge_litert.interpreter import Interpreter

    want = Interpreter(model_path=str(path)).get_signature_runner()(ids=_ids())["rows"]
    got = run_on_gpu(path, {"ids": _ids()}, enforce_f32=True)["rows"]
    assert got.shape == (1, T, E)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_feeds_of_another_shape_are_refused_before_the_accelerator_runs(static_files):
    with pytest.raises(ValueError, match=r"takes its own input shapes only: ids \(1, 9\) \(the file takes \(1, 8\)\)"):
        run_on_gpu(static_files["rows1d"], {"ids": np.zeros((1, T + 1), np.int32)})


def test_no_vulkan_device_is_one_line_naming_the_fix(static_files, tmp_path, monkeypatch):
    """Vulkan's loader pointed at no driver: the accelerator itself finds no adapter (no Vulkan
    device is needed for this test)."""
    nothing = str(tmp_path / "no_driver.json")
    monkeypatch.setenv("VK_ICD_FILENAMES", nothing)
    monkeypatch.setenv("VK_DRIVER_FILES", nothing)
    reason = vulkan_available()
    assert reason is not None and "\n" not in reason
    with pytest.raises(NoVulkanDevice) as caught:
        gpu_placement(static_files["rows1d"])
    text = _one_line(caught.value)
    assert text.startswith("no Vulkan device (") and text.endswith(f"): {NO_VULKAN_FIX}")


@pytest.mark.parametrize("head", ["base", "classification", "mlm"])
def test_what_each_head_keeps_on_the_gpu(head, tmp_path):
    """What the accelerators guide states per head: float32 arithmetic keeps every output to
    PyTorch's float32 tolerance; at the accelerator's default float16 arithmetic hidden states and
    MLM logits keep a cosine of 0.9999, a classifier its labels."""
    _needs_vulkan()
    torch = pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    from albert_edge.converters import tflite

    from ..converters.conftest import TINY, tiny_model

    model = tiny_model(TINY.replace(num_labels=3), head=head)
    path = tflite.export(model, tmp_path / "model.tflite", seq_len=T, static=True)
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(5, TINY.vocab_size, (1, T)).astype(np.int32),
             "attention_mask": np.array([[1] * (T - 2) + [0] * 2], np.int32),
             "token_type_ids": np.zeros((1, T), np.int32)}
    with torch.no_grad():
        out = model(*(torch.from_numpy(feeds[n].astype(np.int64)) for n in feeds))
    want = dict(zip(model.output_names, out if isinstance(out, tuple) else (out,)))
    exact, half = run_on_gpu(path, feeds, enforce_f32=True), run_on_gpu(path, feeds, enforce_f32=False)
    for name, value in want.items():
        value = value.numpy()
        np.testing.assert_allclose(exact[name], value, rtol=1e-4, atol=1e-4)
        if head == "classification":
            assert (half[name].argmax(-1) == value.argmax(-1)).all()
        else:
            a, b = half[name].astype(np.float64).ravel(), value.astype(np.float64).ravel()
            assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) >= 0.9999, name
