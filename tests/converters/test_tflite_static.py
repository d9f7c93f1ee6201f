"""Static-shape TFLite (``convert --to tflite --static``): a [1, N] file of every head that LiteRT's
GPU accelerator takes whole, agrees with PyTorch there, stores each weight once (the position rows
of its length only), and whose fp16 file is static and whole on the GPU too. The accelerator is
the real one (Mesa's lavapipe here); those tests skip, with the reason, where there is no Vulkan
device."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert.compiled_model")

from albert_edge import checkpoints  # noqa: E402
from albert_edge.converters import tf_albert, tflite  # noqa: E402
from albert_edge.converters.export import convert  # noqa: E402
from albert_edge.converters.quantized import quantize_file  # noqa: E402
from albert_edge.converters.verify import verify  # noqa: E402
from albert_edge.errors import ConversionError  # noqa: E402
from albert_edge.formats import manifest  # noqa: E402
from albert_edge.formats.tflite_reader import layer_form, read  # noqa: E402
from albert_edge.formats.weights import analyze, model_param_bytes, unstored_position_bytes  # noqa: E402
from albert_edge.quantize import QuantizeConfig  # noqa: E402
from albert_edge.runtime import Session  # noqa: E402
from albert_edge.runtime.accelerator import NO_VULKAN_FIX, gpu_placement, run_on_gpu, vulkan_available  # noqa: E402

from .conftest import TINY, tiny_model  # noqa: E402

N = 16  # the tiny preset has 64 positions: the static file stores 16 of them
HEADS = ("base", "classification", "mlm", "qa", "token-classification", "pretraining")


def _needs_vulkan() -> None:
    reason = vulkan_available()
    if reason is not None:
        pytest.skip(f"no Vulkan device for LiteRT's GPU accelerator: {reason} ({NO_VULKAN_FIX})")


def _feeds(seed: int = 1) -> dict[str, np.ndarray]:
    """Distinct ids (an all-equal feed hides a wrong position add), the last positions padded,
    two segments."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, TINY.vocab_size, size=(1, N)).astype(np.int32)
    mask = np.ones((1, N), np.int32)
    mask[0, -3:] = 0
    types = np.zeros((1, N), np.int32)
    types[0, N // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _pytorch(model, feeds) -> dict[str, np.ndarray]:
    with torch.no_grad():
        out = model(*(torch.from_numpy(feeds[n].astype(np.int64))
                      for n in ("input_ids", "attention_mask", "token_type_ids")))
    out = out if isinstance(out, tuple) else (out,)
    return {name: t.numpy() for name, t in zip(model.output_names, out)}


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module", params=HEADS)
def static_file(request, tmp_path_factory):
    model = tiny_model(head=request.param)
    path = tflite.export(model, tmp_path_factory.mktemp("static") / "model.tflite", seq_len=N, static=True)
    return model, path


def test_the_file_is_static_and_unrolled(static_file):
    model, path = static_file
    contents = read(path)
    assert {s.shape for s in contents.inputs} == {(1, N)}
    assert all(-1 not in s.shape for s in contents.outputs)
    assert manifest.static_length(path, contents) == N
    assert layer_form(path) == "unrolled"


def test_verify_on_the_cpu_and_the_gpu(static_file):
    model, path = static_file
    report = verify(model, path, seq_len=N)
    assert report.ok, report.problems()
    assert report.static_len == N and report.seq_lens == [N]
    assert report.gpu is not None
    if vulkan_available() is None:
        gpu = report.parity()["gpu"]
        assert gpu["ran"] and gpu["ok"]
        assert gpu["placement"]["all_on_gpu"] and gpu["placement"]["cpu_ops"] == 0, gpu["placement"]
        assert max(gpu["max_abs_diff"].values()) <= 1e-5, gpu["max_abs_diff"]
    else:
        assert report.parity()["gpu"]["ran"] is False


def test_weights_once_with_the_position_rows_of_its_length(static_file):
    model, path = static_file
    contents = read(path)
    weights = analyze(contents, model, static_len=N)
    assert weights.ok and not weights.duplicates, weights.problems()
    expected = model_param_bytes(model) - unstored_position_bytes(model.config, N)
    assert weights.model_param_bytes == expected
    assert expected <= weights.stored_bytes <= expected + 2048  # every weight, plus shape constants
    E, P = model.config.embedding_size, model.config.max_position_embeddings
    shapes = [t.shape for t in contents.weights]
    assert (N, E) in shapes and (P, E) not in shapes


@pytest.mark.parametrize("head", ["base", "classification", "mlm"])
def test_all_on_the_gpu_and_close_to_pytorch(head, tmp_path):
    _needs_vulkan()
    model = tiny_model(head=head)
    path = tflite.export(model, tmp_path / "model.tflite", seq_len=N, static=True)
    placement = gpu_placement(path)
    assert placement.all_on_gpu and placement.cpu_ops == 0 and not placement.fallbacks, placement
    feeds = _feeds()
    expected = _pytorch(model, feeds)
    exact = run_on_gpu(path, feeds, enforce_f32=True)
    half = run_on_gpu(path, feeds, enforce_f32=False)  # the accelerator's default: float16 arithmetic
    for name, want in expected.items():
        assert np.abs(exact[name] - want).max() <= 1e-5, name
        assert _cosine(half[name], want) >= 0.9999, name


def test_a_wrong_gpu_answer_fails_verification(tmp_path, monkeypatch):
    """The position add in the 3-D layout: LiteRT's GPU accelerator takes every operator and adds
    the wrong rows. verify() catches it on the GPU, where the CPU agrees with PyTorch."""
    _needs_vulkan()

    def add_3d(self, x, table, ids):
        import tensorflow as tf

        return x + tf.slice(self._w(table.weight), [0, 0], [self.static_len, -1])

    monkeypatch.setattr(tf_albert.TFAlbert, "_add_positions", add_3d)
    model = tiny_model()
    path = tflite.export(model, tmp_path / "model.tflite", seq_len=N, static=True)
    report = verify(model, path, seq_len=N)
    assert all(case.ok for case in report.cases)  # the CPU is right
    assert not report.ok
    assert report.gpu.placement["all_on_gpu"]
    assert any(p.startswith("on LiteRT's GPU accelerator last_hidden_state differs") for p in report.problems())


def test_without_a_vulkan_device_the_gpu_check_is_not_run(static_file, monkeypatch, tmp_path):
    model, path = static_file
    missing = str(tmp_path / "no-such-icd.json")
    monkeypatch.setenv("VK_ICD_FILENAMES", missing)
    monkeypatch.setenv("VK_DRIVER_FILES", missing)
    report = verify(model, path, seq_len=N)
    assert report.ok, report.problems()
    gpu = report.parity()["gpu"]
    assert gpu["ran"] is False and gpu["reason"].startswith("no Vulkan device")


def test_a_dynamic_file_has_no_gpu_check(tmp_path):
    model = tiny_model()
    path = tflite.export(model, tmp_path / "model.tflite", seq_len=N)
    report = verify(model, path, seq_len=N)
    assert report.ok and report.gpu is None and report.static_len is None
    assert "gpu" not in report.parity()


def test_static_loop_is_refused(tmp_path):
    with pytest.raises(ConversionError, match="runs no WHILE") as caught:
        tflite.export(tiny_model(), tmp_path / "model.tflite", seq_len=N, static=True, layers="loop")
    assert "\n" not in str(caught.value)
    assert not list(tmp_path.iterdir())


# -- fp16 of a static file: static too, and whole on the GPU -------------------------------------

@pytest.fixture(scope="module", params=["base", "classification"])
def fp16_static(request, tmp_path_factory):
    head = request.param
    model = tiny_model(head=head)
    root = tmp_path_factory.mktemp("fp16")
    ckpt = checkpoints.save(model, root / "ckpt")
    out = root / "out"
    convert(str(ckpt), out, targets=("tflite",), head=head, seq_len=N, static=True)
    # one row of N tokens per evaluation batch: the file takes [1, N] only
    result = quantize_file(out / "model.tflite", QuantizeConfig("fp16", batch_size=1, eval_samples=4))
    return model, out, result


def test_fp16_of_a_static_file_is_static(fp16_static):
    model, out, result = fp16_static
    entries = {e.name: e for e in manifest.read(out).files}
    assert entries["model.tflite"].static_len == N
    assert entries[result.out_path.name].static_len == N
    assert manifest.static_length(result.out_path, read(result.out_path)) == N
    assert not result.check.weights.duplicates and result.check.ok, result.check.problems
    assert any("float32 for LiteRT's GPU accelerator" in note for note in result.notes)


def test_fp16_static_file_all_on_the_gpu(fp16_static):
    _needs_vulkan()
    model, out, result = fp16_static
    placement = gpu_placement(result.out_path)
    assert placement.all_on_gpu and placement.cpu_ops == 0 and not placement.fallbacks, placement
    feeds = _feeds()
    cpu = Session(result.out_path).run(feeds)
    exact = run_on_gpu(result.out_path, feeds, enforce_f32=True)
    half = run_on_gpu(result.out_path, feeds, enforce_f32=False)
    expected = _pytorch(model, feeds)
    for name, want in expected.items():
        assert np.abs(exact[name] - cpu[name]).max() <= 1e-5, name  # the GPU computes the file as the CPU does
        assert _cosine(half[name], want) >= 0.9999, name


@pytest.mark.parametrize("vulkan", [True, False], ids=["vulkan", "no-vulkan"])
def test_convert_prints_the_gpu_check(tmp_path, spiece_model, monkeypatch, vulkan):
    """`convert --static` says on screen what the manifest keeps of the GPU check: where the file
    ran and how far from PyTorch, or why it was not run."""
    from click.testing import CliRunner

    from albert_edge.cli import main

    if vulkan:
        _needs_vulkan()
    else:
        missing = str(tmp_path / "no-such-icd.json")
        monkeypatch.setenv("VK_ICD_FILENAMES", missing)
        monkeypatch.setenv("VK_DRIVER_FILES", missing)
    ckpt = checkpoints.save(tiny_model(TINY.replace(vocab_size=400)), tmp_path / "ckpt", spiece=spiece_model)
    result = CliRunner().invoke(main, ["convert", str(ckpt), "--to", "tflite", "--static", "--seq-len", str(N),
                                       "--out", str(tmp_path / "gpu")])
    assert result.exit_code == 0, result.output
    # one line each, wherever the console wraps it
    lines = re.findall(r"model\.tflite on LiteRT's GPU accelerator.*?(?=beside them|manifest:)", " ".join(result.stdout.split()))
    lines = [line.strip() for line in lines]
    gpu = manifest.read(tmp_path / "gpu").files[0].parity["gpu"]
    if vulkan:
        placement = gpu["placement"]
        assert len(lines) == 1 and f"{placement['gpu_ops']} of {placement['ops']} operators on the GPU" in lines[0]
        assert "within the tolerance" in lines[0], lines
    else:
        assert lines == [f"model.tflite on LiteRT's GPU accelerator: not run ({gpu['reason']})"], result.stdout
