"""Session(path, accelerator="gpu"): a static .tflite runs on LiteRT's GPU accelerator in this
process (Mesa's lavapipe here) and answers as the CPU does, with the placement read from the
accelerator's own report; a dynamic file, no Vulkan device, feeds of another length, an .onnx
without CUDA, a .pte and a process that has imported TensorFlow are one line each.

Every GPU session runs in a fresh Python process: the accelerator crashes in one that has imported
TensorFlow (as the test process has, to write the files), and a process that has made a GPU
environment keeps it (the no-Vulkan case needs a fresh one). The GPU cases skip, with the reason,
where there is no Vulkan device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from albert_edge.errors import RuntimeUnavailable, user_message
from albert_edge.runtime import Session
from albert_edge.runtime.accelerator import NO_VULKAN_FIX, NoVulkanDevice, StaticShapeOnly, vulkan_available
from albert_edge.runtime.accelerator import NO_CUDA, software_adapter, software_warning
from albert_edge.runtime.static import StaticShapeMismatch

from .test_gpu_accelerator import static_files  # noqa: F401  (two [1, T] lookups, one with a CPU fallback)

pytest.importorskip("ai_edge_litert.compiled_model")

N = 16

# What every child starts with: the feeds (distinct ids, the last two positions padded, two segments).
_PRELUDE = """
import json, sys
import numpy as np
from albert_edge.errors import user_message
from albert_edge.runtime import Session

def feeds(n=16, seed=3):
    rng = np.random.default_rng(seed)
    mask = np.ones((1, n), np.int32); mask[0, -2:] = 0
    types = np.zeros((1, n), np.int32); types[0, n // 2:] = 1
    return {"input_ids": rng.integers(5, 99, (1, n)).astype(np.int32), "attention_mask": mask,
            "token_type_ids": types}

def cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
"""


def _child(code: str, *args, env: dict | None = None) -> dict:
    """Run ``code`` (after the prelude) in a fresh Python; the JSON it prints last."""
    done = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(code), *map(str, args)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _needs_vulkan() -> None:
    reason = vulkan_available()
    if reason is not None:
        pytest.skip(f"no Vulkan device for LiteRT's GPU accelerator: {reason} ({NO_VULKAN_FIX})")


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and user_message(exc) == text
    return text


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A tiny classifier as `convert --to tflite --static` writes it ([1, N]) and as the dynamic default."""
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    from albert_edge.converters import tflite

    from ..converters.conftest import tiny_model

    out = tmp_path_factory.mktemp("session-gpu")
    model = tiny_model(head="classification")
    return {"static": tflite.export(model, out / "static.tflite", seq_len=N, static=True),
            "dynamic": tflite.export(model, out / "dynamic.tflite", seq_len=N, layers="unrolled")}


def _feeds(n: int = N, seed: int = 3) -> dict[str, np.ndarray]:
    namespace: dict = {}
    exec(_PRELUDE, namespace)
    return namespace["feeds"](n, seed)


def test_the_gpu_answers_as_the_cpu_in_float32_and_says_where_it_ran(files):
    _needs_vulkan()
    got = _child("""
        gpu, cpu = Session(sys.argv[1], accelerator="gpu"), Session(sys.argv[1])
        diffs = [float(np.abs(gpu.run(feeds(seed=s))["logits"] - cpu.run(feeds(seed=s))["logits"]).max())
                 for s in (1, 2)]
        prepared = float(np.abs(gpu.prepare(feeds())()["logits"] - cpu.run(feeds())["logits"]).max())
        print(json.dumps({"accelerator": gpu.accelerator, "precision": gpu.gpu_precision, "static_len": gpu.static_len,
                          "cpu_placement": cpu.placement, "placement": gpu.placement.to_dict(), "diffs": diffs,
                          "prepared": prepared, "shape": list(gpu.run(feeds())["logits"].shape)}))
    """, files["static"])
    assert got["accelerator"] == "gpu" and got["precision"] == "fp32" and got["static_len"] == N
    assert got["cpu_placement"] is None and got["shape"] == [1, 2]
    placement = got["placement"]
    assert placement["enforce_f32"] and placement["all_on_gpu"] and not placement["refused"]
    assert placement["ops"] > 0 and placement["gpu_ops"] == placement["ops"] and placement["cpu_ops"] == 0
    assert placement["fallbacks"] == [] and placement["adapter"] and placement["runtime"].startswith("ai-edge-litert ")
    assert max(got["diffs"]) <= 1e-5 and got["prepared"] <= 1e-5, got


def test_float16_arithmetic_on_request(files):
    _needs_vulkan()
    got = _child("""
        half = Session(sys.argv[1], accelerator="gpu", gpu_precision="fp16")
        print(json.dumps({"precision": half.gpu_precision, "placement": half.placement.to_dict(),
                          "cosine": cosine(half.run(feeds())["logits"], Session(sys.argv[1]).run(feeds())["logits"])}))
    """, files["static"])
    assert got["precision"] == "fp16" and not got["placement"]["enforce_f32"] and got["placement"]["all_on_gpu"]
    assert got["cosine"] >= 0.9999


def test_an_operator_left_on_the_cpu_is_named_from_the_in_process_report(static_files):
    """A [1, T] lookup with 2-D indices: the accelerator leaves its GATHER on the CPU, and says why."""
    _needs_vulkan()
    got = _child("""
        session = Session(sys.argv[1], accelerator="gpu")
        ids = {"ids": (np.arange(8, dtype=np.int32)[None] * 7) % 20}
        diff = float(np.abs(session.run(ids)["rows"] - Session(sys.argv[1]).run(ids)["rows"]).max())
        print(json.dumps({"placement": session.placement.to_dict(), "diff": diff}))
    """, static_files["rows2d"])
    placement = got["placement"]
    assert 0 < placement["cpu_ops"] < placement["ops"]
    assert placement["gpu_ops"] + placement["cpu_ops"] == placement["ops"]
    assert placement["fallbacks"] == [{"op": "GATHER", "reason": "Only support 1D indices"}]
    assert got["diff"] <= 1e-6


def test_feeds_of_another_length_on_the_gpu_are_the_same_one_line(files):
    _needs_vulkan()
    got = _child("""
        session = Session(sys.argv[1], accelerator="gpu")
        try:
            session.run(feeds(20))
        except ValueError as exc:
            print(json.dumps({"type": type(exc).__name__, "line": user_message(exc)}))
    """, files["static"])
    assert got == {"type": "StaticShapeMismatch", "line": "static.tflite: this file takes 16 tokens ([1, 16] inputs), "
                   "not 20: pad or cut the text to 16, or convert with --seq-len 20 --static"}


def test_a_process_that_has_imported_tensorflow_is_told_so(files):
    got = _child("""
        import tensorflow
        try:
            Session(sys.argv[1], accelerator="gpu")
        except Exception as exc:
            print(json.dumps({"type": type(exc).__name__, "line": user_message(exc)}))
    """, files["static"], env={"TF_CPP_MIN_LOG_LEVEL": "3"})
    assert got["type"] == "RuntimeUnavailable"
    assert got["line"].startswith("LiteRT's GPU accelerator crashes in a process that has imported TensorFlow")


def test_a_dynamic_file_is_refused_before_anything_compiles(files):
    with pytest.raises(StaticShapeOnly) as caught:
        Session(files["dynamic"], accelerator="gpu")
    text = _one_line(caught.value)
    assert "takes static-shape files only" in text and "convert --static" in text and "[-1, -1]" in text


@pytest.mark.parametrize("n, fix", [(N + 4, "pad or cut the text to 16"), (N - 6, "pad them to 16 (attention_mask 0")])
def test_feeds_of_another_length_are_one_line(files, n, fix):
    session = Session(files["static"])
    with pytest.raises(StaticShapeMismatch) as caught:
        session.run(_feeds(n))
    text = _one_line(caught.value)
    assert text.startswith(f"static.tflite: this file takes {N} tokens ([1, {N}] inputs), not {n}: {fix}")
    assert text.endswith(f"or convert with --seq-len {n} --static")
    assert isinstance(caught.value, ValueError)  # what Session raises for feeds it cannot take


def test_two_rows_are_one_line(files):
    feeds = {k: np.repeat(v, 2, axis=0) for k, v in _feeds().items()}
    with pytest.raises(StaticShapeMismatch, match=r"takes one row \(\[1, 16\] inputs\).*run the rows one at a time"):
        Session(files["static"]).run(feeds)


def test_no_vulkan_device_is_one_line_naming_the_fix(files, tmp_path):
    """Vulkan's loader pointed at no driver: the accelerator itself finds no adapter."""
    nothing = str(tmp_path / "no_driver.json")
    got = _child("""
        try:
            Session(sys.argv[1], accelerator="gpu")
        except Exception as exc:
            print(json.dumps({"type": type(exc).__name__, "line": user_message(exc)}))
    """, files["static"], env={"VK_ICD_FILENAMES": nothing, "VK_DRIVER_FILES": nothing})
    assert got["type"] == NoVulkanDevice.__name__
    assert got["line"].startswith("no Vulkan device (") and got["line"].endswith(f"): {NO_VULKAN_FIX}")


def test_an_onnx_file_on_the_gpu_needs_cuda(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime build has CUDA: the .onnx would run on it")
    pytest.importorskip("torch")
    from albert_edge.converters import onnx

    from ..converters.conftest import tiny_model

    path = onnx.export(tiny_model(), tmp_path / "model.onnx", seq_len=N)
    with pytest.raises(RuntimeUnavailable) as caught:
        Session(path, accelerator="gpu")
    assert _one_line(caught.value) == NO_CUDA
    assert NO_CUDA.startswith("CUDAExecutionProvider is not available in this onnxruntime build: install "
                              "onnxruntime-gpu on a machine with CUDA")


@pytest.mark.parametrize("kwargs, message", [
    ({"accelerator": "npu"}, "unknown accelerator 'npu'; expected one of cpu, gpu"),
    ({"accelerator": "gpu", "gpu_precision": "int8"}, "unknown GPU precision 'int8'"),
    ({"accelerator": "gpu", "app_defaults": True}, "app_defaults opens a file with the runtime's default options"),
    ({"accelerator": "gpu", "delegate": "none"}, "delegate 'none' is a CPU setting"),
])
def test_options_that_do_not_combine_are_one_line(files, kwargs, message):
    with pytest.raises(RuntimeUnavailable) as caught:
        Session(files["static"], **kwargs)
    assert message in _one_line(caught.value)


def test_a_pte_runs_on_the_cpu_only(tmp_path):
    path = tmp_path / "model.pte"
    path.write_bytes(b"\0\0\0\0ET12")
    with pytest.raises(RuntimeUnavailable) as caught:
        Session(path, accelerator="gpu")
    assert "a .pte runs on the CPU here" in _one_line(caught.value)


@pytest.mark.parametrize("adapter, name", [
    ("llvmpipe (LLVM 15.0.6, 256 bits), arch=software, vendor=mesa, backend=Vulkan, adapterType=CPU / Software",
     "llvmpipe"),
    ("SwiftShader Device (Subzero), arch=software, backend=Vulkan", "swiftshader"),
    ("NVIDIA GeForce RTX 4090, vendor=nvidia, backend=Vulkan, adapterType=Discrete GPU", None),
    (None, None),
])
def test_a_software_adapter_is_told_apart(adapter, name):
    assert software_adapter(adapter) == name
    warning = software_warning(adapter)
    assert (warning is None) == (name is None)
    if warning:
        assert warning == (f"timings on a software Vulkan device ({name}) mean nothing: it proves the GPU path "
                           "takes the file and computes right, not how fast")
